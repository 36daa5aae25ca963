"""The two tiers hold: every test file sits in one, and the in-process tier starts no process.

`make test-unit` runs tests/unit alone and must stay fast; the guard in tests/unit/conftest.py
is what keeps a server, the simulator or bwrap out of it. These tests make the guard and the
layout fail where they would silently stop holding.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys

import pytest

from tests.support.paths import REPO
from tests.unit.conftest import ProcessStarted

TESTS = REPO / "tests"


def test_a_unit_test_cannot_start_a_process() -> None:
    with pytest.raises(ProcessStarted, match="move the test to tests/e2e/"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


async def test_nor_an_asyncio_subprocess() -> None:
    with pytest.raises(ProcessStarted):
        await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")


def test_every_test_file_sits_in_a_tier() -> None:
    loose = sorted(
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in ("unit", "e2e")
        and "node_modules" not in path.parts
    )
    assert loose == [], "each test file goes in tests/unit/ (in-process) or tests/e2e/"


def test_every_courier_server_comes_from_the_factory() -> None:
    """`ServerFactory` (tests/support/server.py) is the one place a test's server is built:
    a copy of its own would again decide data directories, timeouts and cleanup by itself."""
    built = re.compile(r"(?<![\w.])Server\(")
    copies = sorted(
        f"{path.relative_to(TESTS)}:{number}"
        for path in TESTS.rglob("*.py")
        if path != TESTS / "support" / "server.py" and "node_modules" not in path.parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if built.search(line)
    )
    assert copies == [], "start servers with the `servers`/`module_servers` fixtures"
