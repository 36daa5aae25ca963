"""app/ops/open_files.py: the soft open-files limit rises to what the turn cap needs, up to
the hard limit, and never falls."""

from __future__ import annotations

import logging
import resource

import pytest

from app.ops import open_files


class Limits:
    """RLIMIT_NOFILE as the process would see it, for one test."""

    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard
        self.sets: list[tuple[int, int]] = []

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, value: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.sets.append(value)
        self.soft, self.hard = value


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Limits:
    fake = Limits(1024, 524288)
    monkeypatch.setattr(open_files.resource, "getrlimit", fake.get)
    monkeypatch.setattr(open_files.resource, "setrlimit", fake.set)
    return fake


def test_the_soft_limit_rises_to_what_the_default_cap_needs(limits: Limits) -> None:
    needed = open_files.needed_for(1024)
    assert needed > 2 * 1024  # two descriptors a stream at least
    assert open_files.raise_open_files(needed) == needed
    assert limits.sets == [(needed, 524288)]  # the hard limit untouched


def test_it_stops_at_the_hard_limit_and_says_how_many_streams_fit(
    limits: Limits, caplog: pytest.LogCaptureFixture
) -> None:
    limits.soft, limits.hard = 1024, 2048
    with caplog.at_level(logging.WARNING, logger=open_files.__name__):
        assert open_files.raise_open_files(open_files.needed_for(1024)) == 2048
    assert limits.sets == [(2048, 2048)]
    assert "about 256 concurrent streams fit" in caplog.text


def test_it_never_lowers_a_higher_limit(limits: Limits) -> None:
    limits.soft = limits.hard = 1_048_576
    assert open_files.raise_open_files(open_files.needed_for(10)) == 1_048_576
    assert limits.sets == []
