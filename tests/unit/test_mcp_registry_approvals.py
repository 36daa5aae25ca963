"""The registry's toolset swap (an MCP server's new listing) and the approval modes MCP
tools carry, in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.agent.approvals import ApprovalPolicy, TurnGuard, needs_human
from app.agent.opening.tool_snapshot import mcp_portion, snapshot_tools, with_mcp_portion
from app.config import Profile
from app.providers.base import ToolCall
from app.tools.registry import Approval, Tool, ToolContext, ToolRegistry


async def _noop(_args: dict[str, Any], _ctx: ToolContext) -> str:
    return "ok"


def tool(name: str, *, toolset: str = "mcp:srv", prop: str = "a", approval: Approval = "judge"):
    schema = {"type": "object", "properties": {prop: {"type": "string"}}}
    return Tool(name, "d", schema, _noop, toolset=toolset, approval=approval)


def test_the_same_name_with_a_new_schema_gives_new_snapshot_bytes() -> None:
    registry = ToolRegistry([tool("core_tool", toolset="core")])
    registry.replace_toolset("mcp:srv", [tool("mcp__srv__t", prop="a")])
    before = snapshot_tools(registry, ["core", "mcp:srv"])
    registry.replace_toolset("mcp:srv", [tool("mcp__srv__t", prop="b")])
    after = snapshot_tools(registry, ["core", "mcp:srv"])
    assert '"a"' in before and '"b"' in after and before != after


def test_a_swap_drops_views_and_refuses_another_toolsets_name() -> None:
    registry = ToolRegistry([tool("core_tool", toolset="core")])
    registry.replace_toolset("mcp:srv", [tool("mcp__srv__t")])
    view = registry.restricted_to(["mcp__srv__t"])
    registry.replace_toolset("mcp:srv", [])
    assert registry.restricted_to(["mcp__srv__t"]) is not view
    assert registry.get("mcp__srv__t") is None and registry.get("core_tool") is not None
    with pytest.raises(ValueError, match="another toolset"):
        registry.replace_toolset("mcp:srv", [tool("core_tool")])


def test_a_snapshots_mcp_portion_is_replaced_and_the_rest_kept() -> None:
    registry = ToolRegistry([tool("core_tool", toolset="core")])
    registry.replace_toolset("mcp:srv", [tool("mcp__srv__t")])
    old = snapshot_tools(registry, ["core", "mcp:srv"])
    registry.replace_toolset("mcp:srv", [tool("mcp__srv__u")])
    new = with_mcp_portion(old, snapshot_tools(registry, ["mcp:srv"]))
    assert new == snapshot_tools(registry, ["core", "mcp:srv"])
    assert "mcp__srv__u" in mcp_portion(new) and "core_tool" not in mcp_portion(new)


def guard(*, bypass: bool, unattended: str = "ask") -> TurnGuard:
    profile = Profile(unattended=unattended)  # type: ignore[arg-type]
    return TurnGuard(
        None, ApprovalPolicy(bypass=bypass), profile, "s", "t", "o", Path("/nonexistent"), print
    )


@pytest.mark.parametrize(
    ("approval", "bypass", "unattended", "runs"),
    [
        ("allow", False, "ask", True),
        ("ask", False, "ask", False),  # no gate here: whatever needs a human is refused
        ("ask", True, "ask", True),
        ("ask", False, "allow", True),
        ("ask_always", True, "ask", False),
        ("ask_always", False, "allow", False),
    ],
)
async def test_approval_modes(
    approval: Approval, bypass: bool, unattended: str, runs: bool
) -> None:
    mcp_tool = tool("mcp__srv__t", approval=approval)
    # A path argument means something on the server, never in this workspace.
    args = {"a": "/etc/passwd"}
    outcome = await guard(bypass=bypass, unattended=unattended)(
        ToolCall(id="c", name=mcp_tool.name, arguments=""), mcp_tool, args
    )
    assert (outcome is None) == runs


def test_only_protected_paths_and_always_servers_need_a_human() -> None:
    assert needs_human("mcp.always") and needs_human("protected.config")
    assert not needs_human("mcp.changes") and not needs_human("danger.git_force")
