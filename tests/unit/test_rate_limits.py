"""The turn caps in memory (app/security/rate_limits.py): global, per key, per end user."""

from __future__ import annotations

import pytest

from app.security.principal import Principal
from app.security.rate_limits import LimitExceeded, Limits

APP = Principal(owner="key_app")
OTHER_APP = Principal(owner="key_other")


def _refusal(limits: Limits, principal: Principal, end_user: str = "") -> str:
    with pytest.raises(LimitExceeded) as refused:
        limits.acquire_turn(principal, end_user=end_user)
    return refused.value.code


def test_one_end_user_cannot_take_every_turn_of_the_apps_key() -> None:
    limits = Limits(max_concurrent_turns=100, max_turns_per_end_user=2)
    alice = [limits.acquire_turn(APP, end_user="alice") for _ in range(2)]
    assert _refusal(limits, APP, "alice") == "end_user_turn_limit"
    # Another person of the same app, the same name under another key, and requests that
    # name no end user all still pass.
    limits.acquire_turn(APP, end_user="bob")
    limits.acquire_turn(OTHER_APP, end_user="alice")
    for _ in range(5):
        limits.acquire_turn(APP)
    alice[0].release()
    alice[0].release()  # twice is once
    limits.acquire_turn(APP, end_user="alice")
    assert _refusal(limits, APP, "alice") == "end_user_turn_limit"


def test_a_refused_end_user_takes_no_place_under_the_other_caps() -> None:
    limits = Limits(max_concurrent_turns=3, max_turns_per_end_user=1)
    limits.acquire_turn(APP, end_user="alice")
    for _ in range(4):
        _refusal(limits, APP, "alice")
    limits.acquire_turn(APP, end_user="bob")
    limits.acquire_turn(APP)
    assert _refusal(limits, APP, "carol") == "server_busy"


def test_released_end_users_are_forgotten() -> None:
    limits = Limits(max_turns_per_end_user=4)
    slots = [limits.acquire_turn(APP, end_user=f"user-{n}") for n in range(1000)]
    for slot in slots:
        slot.release()
    assert limits._end_users == {} and limits._turns == {} and limits._total == 0


def test_no_per_end_user_cap_when_it_is_off() -> None:
    limits = Limits(max_turns_per_end_user=None)
    for _ in range(50):
        limits.acquire_turn(APP, end_user="alice")
