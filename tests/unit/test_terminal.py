"""The terminal tool's shape and the arguments it refuses before anything runs, and a broken
sandbox is an error, never a run on the host (commands run in real bubblewrap in
tests/e2e/test_terminal.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.tools import terminal
from app.tools.registry import ToolContext, ToolError
from app.tools.sandbox import process as sandbox
from app.tools.terminal import TERMINAL, terminal_tools


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def context(workspace: Path, **overrides: Any) -> ToolContext:
    return ToolContext(session_id="s-terminal", workspace=workspace, **overrides)


async def run(workspace: Path, command: str, **overrides: Any) -> str:
    args: dict[str, Any] = {"command": command}
    if "timeout" in overrides:
        args["timeout"] = overrides.pop("timeout")
    return await TERMINAL.handler(args, context(workspace, **overrides))


def test_tool_shape() -> None:
    assert terminal_tools() == [TERMINAL]
    assert TERMINAL.read_only is False
    assert TERMINAL.available is sandbox.bwrap_available
    assert TERMINAL.path_scope is not None
    assert TERMINAL.path_scope({"command": "ls"}, context(Path("/nowhere"))) is None
    assert TERMINAL.parameters["required"] == ["command"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "non-empty"),
        ({"command": "   "}, "non-empty"),
        ({"command": "echo \x00"}, "NUL"),
        ({"command": "true", "timeout": "soon"}, "timeout"),
        ({"command": "true", "timeout": 0}, "timeout"),
    ],
)
async def test_bad_arguments(workspace: Path, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await TERMINAL.handler(args, context(workspace))


async def test_broken_sandbox_is_an_error_not_a_host_run(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal, "bwrap_available", lambda: False)
    with pytest.raises(ToolError, match="sandbox"):
        await run(workspace, "touch ran")
    assert not (workspace / "ran").exists()
