"""An MCP server's listing as Courier tools: `mcp__<server>__<tool>`, with the server's
schema, an approval mode, and a handler that calls the server.

The server decides what a tool is called and how it is described; this is where that
untrusted listing is held to Courier's rules (names every wire accepts, capped
descriptions and schemas, the operator's allowlist) before any prompt sees it.
"""

from __future__ import annotations

from typing import Any

from app.tools.mcp.config import Approval as ServerApproval
from app.tools.mcp.connection import McpConnection
from app.tools.mcp.names import (
    MAX_TOOLS_PER_SERVER,
    LeftOut,
    description,
    model_names,
    parameters,
)
from app.tools.mcp.outcome import McpOutcome
from app.tools.registry import Approval, Tool, ToolContext, ToolHandler, ToolOutcome


def toolset(server: str) -> str:
    return f"mcp:{server}"


def approval(configured: ServerApproval, *, read_only: bool) -> Approval:
    """`auto` trusts the server's read-only hint only because the operator chose the
    server; a tool without the hint may change things, so a human is asked."""
    if configured == "always":
        return "ask_always"
    if configured == "never" or read_only:
        return "allow"
    return "ask"


def server_tools(conn: McpConnection) -> tuple[list[Tool], list[LeftOut]]:
    """The tools the connection's current listing offers, and those left out (and why)."""
    wanted = conn.config.tools
    listed = {t.name: t for t in conn.listing or () if wanted is None or t.name in wanted}
    left_out: list[LeftOut] = []
    names = sorted(listed)
    if len(names) > MAX_TOOLS_PER_SERVER:
        extra = names[MAX_TOOLS_PER_SERVER:]
        left_out += [LeftOut(n, f"over {MAX_TOOLS_PER_SERVER} tools per server") for n in extra]
        names = names[:MAX_TOOLS_PER_SERVER]
    tools: list[Tool] = []
    for name, raw in model_names(conn.name, names).items():
        listing = listed[raw]
        schema = parameters(listing.input_schema)
        if isinstance(schema, str):
            left_out.append(LeftOut(raw, schema))
            continue
        hints = listing.annotations
        read_only = hints is not None and hints.read_only_hint is True
        tools.append(
            Tool(
                name=name,
                description=description(listing.description, server=conn.name),
                parameters=schema,
                handler=_handler(conn, raw),
                read_only=read_only,
                toolset=toolset(conn.name),
                approval=approval(conn.config.approval, read_only=read_only),
            )
        )
    return tools, left_out


def _handler(conn: McpConnection, raw: str) -> ToolHandler:
    async def call(args: dict[str, Any], _ctx: ToolContext) -> ToolOutcome:
        outcome, kind = await conn.call(raw, args)
        return McpOutcome(
            outcome.content, outcome.is_error, kind, conn.name, raw, images=outcome.images
        )

    return call
