"""Quotas a tool call cannot exceed: workspace bytes, disk reserve, memory, CPU, file size.

Real bubblewrap and real files; the limits are set small so each case runs in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.config import GiB, ToolQuota
from app.tools.builtin import file_tools
from app.tools.registry import ToolContext, ToolError
from app.tools.sandbox import process as sandbox
from app.tools.sandbox.memory_cgroup import memory_cgroup_parent
from app.tools.terminal import TERMINAL

MiB = 1024**2
TOOLS = {t.name: t for t in file_tools()}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _ctx(ws: Path, **quota: Any) -> ToolContext:
    return ToolContext(session_id="s-quota", workspace=ws, quota=ToolQuota(**quota))


def _usage(ws: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in ws.rglob("*"))


async def _terminal(ctx: ToolContext, command: str) -> str:
    return await TERMINAL.handler({"command": command}, ctx)


async def test_a_write_loop_stops_at_the_workspace_quota(ws: Path) -> None:
    ctx = _ctx(ws, workspace_bytes=1 * MiB, disk_reserve_bytes=0)
    chunk = "x" * (100 * 1024)
    written = refused = 0
    for i in range(50):  # 5 MiB attempted against a 1 MiB quota
        try:
            await TOOLS["write_file"].handler({"path": f"d/f{i}", "content": chunk}, ctx)
            written += 1
        except ToolError as exc:
            assert "workspace quota exceeded" in str(exc)
            refused += 1
    assert 5 <= written <= 10 and refused == 50 - written
    assert _usage(ws) <= 1 * MiB
    # The session keeps working: reads, and a write that frees space, still succeed.
    assert "x" in await TOOLS["read_file"].handler({"path": "d/f0", "limit": 1}, ctx)
    await TOOLS["write_file"].handler({"path": "d/f0", "content": "small"}, ctx)
    await TOOLS["write_file"].handler({"path": "d/again", "content": chunk}, ctx)


@pytest.fixture(scope="module", autouse=True)
def _require_bwrap() -> None:
    if not sandbox.bwrap_available():
        pytest.fail("bwrap is missing or cannot create a sandbox here; run `make install`")


async def test_a_terminal_write_loop_is_stopped_at_the_quota(ws: Path) -> None:
    ctx = _ctx(ws, workspace_bytes=8 * MiB, disk_reserve_bytes=0)
    # Bounded to 200 MiB so a failure of this test cannot fill the shared disk.
    out = await _terminal(
        ctx,
        "for i in $(seq 200); do head -c 1048576 /dev/zero > f$i || exit 9; sleep 0.01; done; "
        "echo finished",
    )
    assert "finished" not in out
    assert "quota" in out
    assert len(list(ws.iterdir())) < 200
    # The next call is told the workspace is over quota, and may clean up.
    out = await _terminal(ctx, "rm -f f*; echo cleaned")
    assert "cleaned" in out
    assert _usage(ws) < 8 * MiB


async def test_one_file_is_capped_by_the_quota_left(ws: Path) -> None:
    ctx = _ctx(ws, workspace_bytes=4 * MiB, disk_reserve_bytes=0)
    out = await _terminal(ctx, "head -c 20000000 /dev/zero > big; echo done")
    assert "file size limit" in out.lower(), out
    assert (ws / "big").stat().st_size <= 4 * MiB


async def test_a_three_gib_allocation_is_killed_with_a_clear_error(ws: Path) -> None:
    ctx = _ctx(ws, memory_bytes=1 * GiB)
    out = await _terminal(
        ctx, "python3 -c 'b = bytearray(3 * 1024**3); print(\"allocated\", len(b))'"
    )
    assert "allocated" not in out
    if memory_cgroup_parent() is not None:
        assert out.startswith("killed: the command exceeded its memory limit"), out
    else:  # RLIMIT_AS: the allocation fails inside the process instead
        assert "MemoryError" in out, out


async def test_cpu_time_is_limited(ws: Path) -> None:
    ctx = _ctx(ws, cpu_seconds=1)
    out = await _terminal(ctx, "while :; do :; done")
    assert "CPU time limit" in out, out


async def test_a_terminal_write_loop_stops_at_the_disk_reserve(ws: Path) -> None:
    import os

    st = os.statvfs(ws)
    free = st.f_bavail * st.f_frsize
    # A reserve just under today's free space: a few MiB of writes cross it.
    ctx = _ctx(ws, workspace_bytes=1 * GiB, disk_reserve_bytes=free - 4 * MiB)
    out = await _terminal(
        ctx,
        "for i in $(seq 200); do head -c 1048576 /dev/zero > f$i || exit 9; sleep 0.01; done; "
        "echo finished",
    )
    assert "finished" not in out
    assert "free-space reserve" in out or "file size limit" in out.lower(), out
    assert len(list(ws.iterdir())) < 200
