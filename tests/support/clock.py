"""A clock a test moves by hand, for code that takes its clock as an argument.

`clock()` reads it; `clock.now += 30` (or `clock.advance(30)`) moves it. Never a sleep: a
test that waited for real time would be slow, and on a loaded machine, wrong.
"""

from __future__ import annotations

import pytest


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()
