"""What an MCP call's result carries beyond its text: which server answered, its own name
for the tool, and the ledger's word for how the call went.

Kept apart from the SDK (no `mcp` import): the turn's batch runner reads it for every MCP
call it stores (`app/agent/tool_step.py` -> `app/db/mcp_store.py`), and a chat turn must
not import the SDK to do so.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.tools.registry import ToolOutcome

NOT_RUN = "not_run"
"""The ledger's word for an MCP call answered before it reached the server (the approval
ladder refused it, its arguments did not parse, the tool is not the session's)."""


@dataclass(frozen=True, slots=True)
class McpOutcome(ToolOutcome):
    kind: str = "ok"
    """ok, tool_error, timeout, unavailable, closed or protocol."""
    server: str = ""
    tool: str = ""
    """The server's own name for the tool."""
