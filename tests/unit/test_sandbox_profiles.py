"""Which sandbox profile a host gets: a bare host never falls back, a container takes the
first fallback that starts or names the options to add (bwrap itself is faked here; the
profiles run for real in tests/e2e/test_sandbox_profiles.py)."""

from __future__ import annotations

import pytest

from app.tools.sandbox import process as sandbox
from app.tools.sandbox.process import (
    FULL_PROFILE,
    SandboxProfile,
)

NO_PROC = SandboxProfile(hostname=False, fresh_proc=False, disable_userns=False)


def test_missing_names_the_option_that_restores_each_step() -> None:
    assert FULL_PROFILE.missing() == []
    lost = NO_PROC.missing()
    assert any("seccomp=unconfined" in line for line in lost)
    assert any("unmask=ALL" in line and "systempaths=unconfined" in line for line in lost)


def test_a_bare_host_never_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[SandboxProfile] = []

    def fail(_bwrap: str, profile: SandboxProfile) -> str:
        tried.append(profile)
        return "bwrap exited 1: Can't mount proc"

    monkeypatch.setattr(sandbox, "_try_profile", fail)
    monkeypatch.setattr(sandbox, "in_container", lambda: False)
    assert sandbox._choose_profile() == (None, "bwrap exited 1: Can't mount proc")
    assert tried == [FULL_PROFILE]


def test_a_container_takes_the_first_fallback_that_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def only_without_proc(_bwrap: str, profile: SandboxProfile) -> str | None:
        return None if not profile.fresh_proc else "bwrap: Can't mount proc on /newroot/proc"

    monkeypatch.setattr(sandbox, "_try_profile", only_without_proc)
    monkeypatch.setattr(sandbox, "in_container", lambda: True)
    assert sandbox._choose_profile() == (NO_PROC, "")


def test_a_container_where_nothing_starts_says_which_options_to_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sandbox, "_try_profile", lambda _b, _p: "bwrap: No permissions")
    monkeypatch.setattr(sandbox, "in_container", lambda: True)
    profile, reason = sandbox._choose_profile()
    assert profile is None
    assert "seccomp=unconfined" in reason and "apparmor=unconfined" in reason
