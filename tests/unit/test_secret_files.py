"""COURIER_<NAME>_FILE: keys read from files (Docker secrets, systemd credentials)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, load_settings

GOOD_KEY = "a-perfectly-fine-key-123"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("API_KEY", "ADMIN_API_KEY", "METRICS_API_KEY", "UPSTREAM_API_KEY"):
        monkeypatch.delenv(f"COURIER_{name}", raising=False)
        monkeypatch.delenv(f"COURIER_{name}_FILE", raising=False)


def test_the_key_comes_from_the_file_without_its_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "key").write_text(GOOD_KEY + "\n")
    (tmp_path / "up").write_text("sk-upstream-from-file\r\n")
    monkeypatch.setenv("COURIER_API_KEY_FILE", str(tmp_path / "key"))
    monkeypatch.setenv("COURIER_UPSTREAM_API_KEY_FILE", str(tmp_path / "up"))
    settings = load_settings()
    assert settings.api_key.get_secret_value() == GOOD_KEY
    assert settings.upstream_api_key is not None
    assert settings.upstream_api_key.get_secret_value() == "sk-upstream-from-file"


def test_a_weak_key_in_a_file_is_refused_like_one_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "key").write_text("changeme\n")
    monkeypatch.setenv("COURIER_API_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ConfigError, match="placeholder"):
        load_settings()


def test_a_missing_file_names_the_variable_and_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURIER_API_KEY_FILE", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match=r"COURIER_API_KEY_FILE=.*absent: cannot read it"):
        load_settings()


def test_both_the_variable_and_the_file_is_ambiguous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "key").write_text(GOOD_KEY)
    monkeypatch.setenv("COURIER_API_KEY_FILE", str(tmp_path / "key"))
    monkeypatch.setenv("COURIER_API_KEY", "another-fine-key-456789")
    with pytest.raises(ConfigError, match="not both"):
        load_settings()


def test_an_empty_file_is_an_unset_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "key").write_text("\n")
    monkeypatch.setenv("COURIER_API_KEY_FILE", str(tmp_path / "key"))
    with pytest.raises(ConfigError, match="not set"):
        load_settings()
