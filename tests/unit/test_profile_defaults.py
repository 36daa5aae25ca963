"""Defaults that depend on who talks to a profile: a voice client's second message is a
barge-in (`interrupt`), a chat client's waits its turn (`enqueue`); and the drain a
SIGTERM allows running turns."""

from __future__ import annotations

import pytest

from app.config import ConfigError, Profile, Settings, load_settings

KEY = "test-key-0123456789abcdef"


def test_chat_profiles_enqueue_and_voice_profiles_interrupt() -> None:
    assert Profile().busy == "enqueue"
    assert Profile(kind="chat").busy == "enqueue"
    assert Profile(kind="voice").busy == "interrupt"


def test_an_explicit_busy_wins_over_the_kind() -> None:
    assert Profile(kind="voice", busy="steer").busy == "steer"
    assert Profile(kind="chat", busy="reject").busy == "reject"
    # From TOML a null means "not set": the kind decides.
    assert Profile.model_validate({"kind": "voice", "busy": None}).busy == "interrupt"


def test_the_default_profile_follows_courier_profile_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COURIER_PROFILE_KIND", "voice")
    assert load_settings(api_key=KEY).default_profile().busy == "interrupt"
    monkeypatch.setenv("COURIER_BUSY", "enqueue")
    assert load_settings(api_key=KEY).default_profile().busy == "enqueue"
    monkeypatch.delenv("COURIER_BUSY")
    monkeypatch.setenv("COURIER_PROFILE_KIND", "chat")
    assert load_settings(api_key=KEY).default_profile().busy == "enqueue"


def test_an_unknown_kind_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURIER_PROFILE_KIND", "phone")
    with pytest.raises(ConfigError, match="profile_kind"):
        load_settings(api_key=KEY)
    with pytest.raises(ValueError, match="kind"):
        Profile.model_validate({"kind": "phone"})


def test_the_drain_defaults_to_30_seconds() -> None:
    assert Settings.model_fields["drain_timeout_s"].default == 30
    assert load_settings(api_key=KEY).drain_timeout_s == 30
