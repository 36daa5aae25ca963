"""The symlink-swap race against the file tools, with a real process swapping directories.

A shared workspace's terminal can exchange a directory `d` with a symlink to a host
directory in a tight loop (renameat2 RENAME_EXCHANGE is atomic), while a file tool reads
`d/f` or writes `d/x`. A check-then-reopen implementation loses this race a few percent of
the time; descriptor-relative resolution must lose it never.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.tools.files import _write
from app.tools.registry import ToolContext, ToolError
from app.tools.workspace import _read
from tests.support.approvals import call, tool_results
from tests.support.server import ServerFactory
from tests.support.sim import Simulator

ATTEMPTS = 10_000
HOST_SECRET = "HOST-SECRET"

SWAPPER = textwrap.dedent(
    """
    import ctypes, os, signal, sys
    libc = ctypes.CDLL(None, use_errno=True)
    a, b, out = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
    swaps = 0
    def stop(*_):
        with open(out, "w") as fh:
            fh.write(str(swaps))
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    print("ready", flush=True)
    while True:
        if libc.renameat2(-100, a, -100, b, 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
            swaps += 1
    """
)


def _has_renameat2() -> bool:
    return hasattr(ctypes.CDLL(None), "renameat2")


pytestmark = pytest.mark.skipif(not _has_renameat2(), reason="libc without renameat2")


def test_swapping_a_directory_for_a_host_symlink_never_escapes(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    host = tmp_path / "host"
    (ws / "d").mkdir(parents=True)
    host.mkdir()
    (ws / "d" / "f").write_text("inside\n")
    (host / "f").write_text(HOST_SECRET + "\n")
    (ws / "s").symlink_to(host, target_is_directory=True)
    ctx = ToolContext(session_id="race", workspace=ws)
    counter = tmp_path / "swaps"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws / "d"), str(ws / "s"), str(counter)],
        stdout=subprocess.PIPE,
        text=True,
    )
    read_escapes = reads_ok = refusals = 0
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        for _ in range(ATTEMPTS):
            try:
                out = _read({"path": "d/f"}, ctx)
            except (ToolError, OSError):
                refusals += 1  # d was a link at that moment: refused or not found
                continue
            if HOST_SECRET in out:
                read_escapes += 1
            else:
                reads_ok += 1
        for i in range(ATTEMPTS):
            try:
                _write({"path": f"d/x{i % 50}", "content": "payload"}, ctx)
            except (ToolError, OSError):
                refusals += 1
    finally:
        swapper.send_signal(signal.SIGTERM)
        swapper.wait(timeout=10)
    swaps = int(counter.read_text())
    write_escapes = sorted(p.name for p in host.iterdir() if p.name != "f")
    assert read_escapes == 0
    assert write_escapes == []
    assert (host / "f").read_text() == HOST_SECRET + "\n"
    # The race was live: the swapper really swapped, and the tools saw both states.
    assert swaps > ATTEMPTS
    assert reads_ok > 0 and refusals > 0
    written = [p for p in (ws / "d").iterdir()] + [p for p in (ws / "s").iterdir()]
    assert any(p.name.startswith("x") for p in written)
    # No temp file left behind by a refused write.
    assert not [p for p in written if p.name.startswith(".courier-")]


# ---------------------------------------------------------------- through the real server

ROUNDS = 8
CALLS_PER_ROUND = 40


@pytest.fixture
def swapping_workspace(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A shared workspace whose `d` a separate process swaps with a host symlink, nonstop."""
    ws, host = tmp_path / "ws", tmp_path / "host"
    (ws / "d").mkdir(parents=True)
    host.mkdir()
    (ws / "d" / "f").write_text("inside\n")
    (host / "f").write_text(HOST_SECRET + "\n")
    (ws / "s").symlink_to(host, target_is_directory=True)
    counter = tmp_path / "swaps"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws / "d"), str(ws / "s"), str(counter)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None and swapper.stdout.readline() == "ready\n"
        yield ws, host
    finally:
        swapper.send_signal(signal.SIGTERM)
        swapper.wait(timeout=10)
    assert int(counter.read_text()) > 0


def test_a_turn_racing_a_swapped_directory_ends_with_tool_errors_never_a_500(
    simulator: Simulator, servers: ServerFactory, swapping_workspace: tuple[Path, Path]
) -> None:
    """The hostile model reads and writes through `d` while another process swaps it; the
    guard's path checks (realpath raises EINVAL when `d` changes mid-call) must turn into
    tool results, and the turn must end normally."""
    ws, host = swapping_workspace
    simulator.reset()
    calls = [
        call("read_file", path="d/f") if i % 2 else call("write_file", path=f"d/x{i}", content="p")
        for i in range(CALLS_PER_ROUND)
    ]
    simulator.script(
        [{"reply": {"tool_calls": calls}} for _ in range(ROUNDS)] + [{"reply": {"text": "done"}}]
    )
    server = servers(COURIER_WORKSPACE=str(ws))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "race"}]},
        headers=server.headers(),
        timeout=120,
    )
    server.stop()
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "done"
    results = tool_results(simulator)  # the last request carries every round's results
    assert len(results) == ROUNDS * CALLS_PER_ROUND
    assert not [r for r in results if HOST_SECRET in r]
    assert not [r for r in results if "internal error" in r]
    errors = [r for r in results if r.startswith("error:")]
    assert errors and len(errors) < len(results)  # the race was live: both states were seen
    assert sorted(p.name for p in host.iterdir()) == ["f"]
