"""Settings that startup reads: exposed binds, frozen settings, TOML profiles (the refusals
of a real `courier serve` process are in tests/e2e/test_startup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD_KEY = "a-perfectly-fine-key-123"


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
