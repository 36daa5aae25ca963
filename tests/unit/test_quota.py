"""Quotas the file tools hold without a sandbox: an overwrite counts only its growth, and the
disk reserve refuses writes (the sandboxed limits are in tests/e2e/test_quota.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.config import ToolQuota
from app.tools.builtin import file_tools
from app.tools.registry import ToolContext, ToolError

MiB = 1024**2
TOOLS = {t.name: t for t in file_tools()}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def _ctx(ws: Path, **quota: Any) -> ToolContext:
    return ToolContext(session_id="s-quota", workspace=ws, quota=ToolQuota(**quota))


async def test_overwriting_counts_only_the_growth(ws: Path) -> None:
    ctx = _ctx(ws, workspace_bytes=1 * MiB, disk_reserve_bytes=0)
    big = "y" * (600 * 1024)
    await TOOLS["write_file"].handler({"path": "f", "content": big}, ctx)
    # 600 KiB replacing 600 KiB fits a 1 MiB quota; a second 600 KiB file does not.
    await TOOLS["write_file"].handler({"path": "f", "content": big + "z"}, ctx)
    with pytest.raises(ToolError, match="quota"):
        await TOOLS["write_file"].handler({"path": "g", "content": big}, ctx)


async def test_the_disk_reserve_refuses_tool_writes(ws: Path) -> None:
    ctx = _ctx(ws, disk_reserve_bytes=10**18)  # more than any disk: always "nearly full"
    with pytest.raises(ToolError, match="disk is nearly full"):
        await TOOLS["write_file"].handler({"path": "f", "content": "x"}, ctx)
    assert not (ws / "f").exists()
