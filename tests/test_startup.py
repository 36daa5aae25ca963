"""Startup refusals: the real `courier serve` process, one clear line, non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD_KEY = "a-perfectly-fine-key-123"


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "serve"],
        env={**clean, "COURIER_DATA_DIR": str(tmp_path), "COURIER_PORT": "0", **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (None, "not set"),
        ("", "not set"),
        ("short-key", "at least 16"),
        ("changeme", "placeholder"),
        ("password1234567890", "placeholder"),
        ("aaaaaaaaaaaaaaaaaaaaaaaa", "placeholder"),
        ("sk-xxxxxxxxxxxxxxxxxxxx", "placeholder"),
    ],
)
def test_refuses_weak_keys(tmp_path: Path, key: str | None, says: str) -> None:
    env = {} if key is None else {"COURIER_API_KEY": key}
    result = _serve(tmp_path, **env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert says in lines[0]
    assert key is None or not key or key not in lines[0] or says == "placeholder"


def test_refuses_exposed_bind_without_sandbox(tmp_path: Path) -> None:
    result = _serve(
        tmp_path, COURIER_API_KEY=GOOD_KEY, COURIER_HOST="0.0.0.0", COURIER_TERMINAL_BACKEND="local"
    )
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "refusing to bind 0.0.0.0" in line and "remote code execution" in line


def test_sandboxed_profiles_may_bind_exposed() -> None:
    from app.config import load_settings

    assert load_settings(api_key=GOOD_KEY, host="0.0.0.0").host == "0.0.0.0"


def test_settings_accept_exposed_bind_when_overridden() -> None:
    from app.config import load_settings

    settings = load_settings(api_key=GOOD_KEY, host="0.0.0.0", allow_exposed_host_exec=True)
    assert settings.host == "0.0.0.0"


def test_settings_are_frozen() -> None:
    from pydantic import ValidationError

    from app.config import load_settings

    settings = load_settings(api_key=GOOD_KEY)
    with pytest.raises(ValidationError):
        settings.allow_exposed_host_exec = True  # type: ignore[misc]


def test_toml_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import load_settings

    path = tmp_path / "courier.toml"
    path.write_text(
        '[[profiles]]\nname = "claude"\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        "max_iterations = 5\n"
    )
    monkeypatch.setenv("COURIER_CONFIG", str(path))
    settings = load_settings(api_key=GOOD_KEY)
    names = [p.name for p in settings.all_profiles()]
    assert names == ["courier", "claude"]
    assert settings.all_profiles()[1].max_iterations == 5


def test_keygen_prints_a_strong_key() -> None:
    from app.config import key_problem

    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "keygen"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert key_problem(out) is None


def test_refuses_a_broken_tool_plugin(tmp_path: Path) -> None:
    result = _serve(tmp_path, COURIER_API_KEY=GOOD_KEY, COURIER_TOOL_PLUGINS="no.such.module:X")
    assert result.returncode == 2
    assert "could not be loaded" in result.stderr.strip()
