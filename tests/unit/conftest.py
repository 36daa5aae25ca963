"""The in-process tier: no test here starts a process.

A test that spawned one (a server, the simulator, bwrap, a fresh interpreter) would make the
fast tier slow and its failures depend on the host; the guard below turns that into a
failure that names the command, so the tier stays what its folder says. Such a test
belongs in tests/e2e/, or the part that spawns wants faking.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


class ProcessStarted(AssertionError):
    """A test of the in-process tier tried to start a process."""


def _refuse(_popen: subprocess.Popen[Any], args: Any, *_rest: Any, **_kw: Any) -> None:
    raise ProcessStarted(
        f"tests/unit runs in-process, but this test started {args!r}: "
        "fake the part that spawns, or move the test to tests/e2e/"
    )


@contextmanager
def no_processes() -> Iterator[None]:
    """`Popen`'s one spawning step refused: `run`, `check_output` and asyncio's subprocesses
    all go through it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse)
        yield


# Setup and teardown too: a fixture (of any scope) that starts a server is refused as well.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with no_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with no_processes():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    with no_processes():
        return (yield)
