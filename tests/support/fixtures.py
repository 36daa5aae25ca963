"""Pytest fixtures for the upstream simulator; import them into a conftest:

from tests.support.fixtures import sim, simulator  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.sim import Simulator, start_simulator


@pytest.fixture(scope="session")
def simulator() -> Iterator[Simulator]:
    """One simulator process for the whole session."""
    running = start_simulator()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def sim(simulator: Simulator) -> Simulator:
    """The session's simulator, reset to its startup state for this test."""
    simulator.reset()
    return simulator
