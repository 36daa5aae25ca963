"""Startup refusals: the real `courier serve` process, one clear line, non-zero exit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerFactory

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
        ("abcdabcdabcdabcd", "pattern repeated"),
        ("ab-ab-ab-ab-ab-ab-ab", "pattern repeated"),
        ("aabbccddaabbccddx", "fewer than 8 distinct"),
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


def test_keygen_prints_a_strong_key() -> None:
    from app.config import key_problem

    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "keygen"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert key_problem(out) is None


def test_refuses_a_broken_tool_plugin(tmp_path: Path) -> None:
    result = _serve(
        tmp_path,
        COURIER_API_KEY=GOOD_KEY,
        COURIER_UPSTREAM_BASE_URL="http://127.0.0.1:9/v1",
        COURIER_TOOL_PLUGINS="no.such.module:X",
    )
    assert result.returncode == 2
    assert "could not be loaded" in result.stderr.strip()


def test_refuses_to_start_with_no_upstream_key_nor_base_url(tmp_path: Path) -> None:
    """Unset, turns would go to the public OpenAI API with no key."""
    result = _serve(tmp_path, COURIER_API_KEY=GOOD_KEY)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "COURIER_UPSTREAM_API_KEY" in line and "COURIER_UPSTREAM_BASE_URL" in line


def test_a_toml_profile_with_neither_is_named(tmp_path: Path) -> None:
    config = tmp_path / "courier.toml"
    config.write_text('[[profiles]]\nname = "claude"\nprovider = "anthropic"\n')
    result = _serve(
        tmp_path,
        COURIER_API_KEY=GOOD_KEY,
        COURIER_UPSTREAM_BASE_URL="http://127.0.0.1:11434/v1",
        COURIER_CONFIG=str(config),
    )
    assert result.returncode == 2
    assert "profile 'claude'" in result.stderr and "base_url" in result.stderr


def test_the_data_dir_and_database_are_owner_only(servers: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    # The log goes beside it: the data directory must be one the server creates itself.
    server = servers(data_dir=tmp_path / "logs", COURIER_DATA_DIR=str(data))
    turn = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "hi"}]},
        headers=server.headers(),
        timeout=30,
    )
    assert turn.status_code in (200, 502)  # either way the store has written
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data.iterdir()}
    server.stop()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("courier.db", "courier.db-wal", "courier.db-shm", "courier.lock"):
        assert modes[name] == 0o600, (name, oct(modes[name]))
