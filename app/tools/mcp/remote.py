"""The Responses API's remote `mcp` tool: servers one request declares, their listings as
tools the model sees, and which calls wait for the client's approval.

A remote server is the caller's, not the operator's: its URL and headers arrive in the
request and live only as long as the request does. Its tools join that one turn's
registry view and nothing else, so a later request that does not declare the server
cannot call them (the view is rebuilt from each request). This module holds no SDK: the
connection itself is `remote_client.py`'s, imported only when a request declares one.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.tools.mcp.names import MAX_TOOLS_PER_SERVER, description, model_names, parameters
from app.tools.mcp.outcome import McpOutcome
from app.tools.registry import Tool, ToolContext, ToolHandler, ToolOutcome
from app.tools.untrusted import fence

RESULT_KIND = "MCP RESULT"
"""The fence's name around an MCP result (results.py's KIND, without its SDK import)."""
MAX_OUTPUT_CHARS = 100_000
"""An `mcp_call` item's output, as the client sees it (the model's copy is spilled as any
tool result is)."""


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """The spec's `McpToolFilter`: tool names and/or the read-only hint; a filter that
    says neither matches every tool."""

    names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, *, read_only: bool) -> bool:
        if self.names is not None and name not in self.names:
            return False
        return self.read_only is None or read_only == self.read_only


@dataclass(frozen=True, slots=True)
class RemoteServer:
    label: str
    url: str
    headers: tuple[tuple[str, str], ...] = field(repr=False, default=())
    """Sent to the server only: never stored, logged or echoed."""
    allowed: ToolFilter | None = None
    """`allowed_tools`: None offers every listed tool."""
    ask_always: ToolFilter | None = ToolFilter()
    """`require_approval`: calls to matching tools wait for an `mcp_approval_response`
    (the spec's default is `always`)."""
    ask_never: ToolFilter | None = None

    @property
    def prefix(self) -> str:
        """The label as the server part of `mcp__<server>__<tool>`: an underscore would
        make `__` ambiguous."""
        return self.label.replace("_", "-")

    def needs_approval(self, name: str, *, read_only: bool) -> bool:
        """A tool both filters match asks: the cautious reading of a contradiction."""
        if self.ask_always is not None and self.ask_always.matches(name, read_only=read_only):
            return True
        return not (
            self.ask_never is not None and self.ask_never.matches(name, read_only=read_only)
        )


@dataclass(frozen=True, slots=True)
class ListedTool:
    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None

    @property
    def read_only(self) -> bool:
        return bool(self.annotations and self.annotations.get("readOnlyHint") is True)

    def item(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


@dataclass(frozen=True, slots=True)
class Listing:
    """One server's `tools/list` answer, as the `mcp_list_tools` item the client sees."""

    id: str
    label: str
    tools: tuple[ListedTool, ...] = ()
    error: str | None = None
    reused: bool = False
    """Taken from an earlier response of the chain: no new `mcp_list_tools` item."""

    def item(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "mcp_list_tools",
            "server_label": self.label,
            "tools": [t.item() for t in self.tools],
            "error": self.error,
        }

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Listing:
        tools = tuple(
            ListedTool(
                name=str(t["name"]),
                description=t.get("description"),
                input_schema=dict(t.get("input_schema") or {}),
                annotations=t.get("annotations"),
            )
            for t in item.get("tools") or ()
        )
        return cls(id=str(item["id"]), label=str(item["server_label"]), tools=tools, reused=True)


@dataclass(frozen=True, slots=True)
class RemoteOutcome(McpOutcome):
    """A remote call's result: the fenced text the model reads, plus what the client's
    `mcp_call` item shows (the server's own text, or the error object)."""

    output: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """What a remote tool is to the client: its server's label and its raw name."""

    label: str
    raw: str


@dataclass(frozen=True, slots=True)
class RemoteTools:
    """The request's remote servers as one turn's tools (empty on every other turn)."""

    tools: tuple[Tool, ...] = ()
    named: Mapping[str, RemoteTool] = field(default_factory=dict)
    """model-facing name -> its server and raw name; the calls rendered as `mcp_call`."""
    held: frozenset[str] = frozenset()
    """Names whose calls end the turn with an `mcp_approval_request` instead of running."""
    approved: tuple[tuple[str, str], ...] = ()
    """(call id, where the approval sits in the request) of calls the client approved:
    they run before the model is called again."""

    def __bool__(self) -> bool:
        return bool(self.tools or self.approved)


NO_REMOTE_TOOLS = RemoteTools()
"""Every turn but a Responses request's with `mcp` tools: one shared (frozen) value, so a
chat turn builds nothing for a feature it does not use."""

Call = Callable[[RemoteServer, str, dict[str, Any]], Awaitable[RemoteOutcome]]
"""Calls a remote server's raw tool (remote_client.call_tool, bound to the settings)."""


def remote_tools(
    servers: tuple[RemoteServer, ...],
    listings: Mapping[str, Listing],
    *,
    call: Call,
    approved: tuple[tuple[str, str], ...] = (),
) -> RemoteTools:
    """The declared servers' listed tools, narrowed by `allowed_tools`, as Courier tools."""
    tools: list[Tool] = []
    named: dict[str, RemoteTool] = {}
    held: set[str] = set()
    for server in servers:
        listing = listings.get(server.label)
        if listing is None:
            continue
        listed = {
            t.name: t
            for t in listing.tools
            if server.allowed is None or server.allowed.matches(t.name, read_only=t.read_only)
        }
        wanted = sorted(listed)[:MAX_TOOLS_PER_SERVER]
        for name, raw in model_names(server.prefix, wanted).items():
            tool = listed[raw]
            schema = parameters(tool.input_schema)
            if isinstance(schema, str):
                continue  # over the caps: left out, as a configured server's would be
            tools.append(
                Tool(
                    name=name,
                    description=description(tool.description, server=server.label),
                    parameters=schema,
                    handler=_handler(call, server, raw),
                    read_only=tool.read_only,
                    toolset=f"mcp-remote:{server.label}",
                    # The client decided (require_approval): the ladder does not ask again.
                    approval="allow",
                )
            )
            named[name] = RemoteTool(server.label, raw)
            if server.needs_approval(raw, read_only=tool.read_only):
                held.add(name)
    return RemoteTools(tuple(tools), named, frozenset(held), approved)


def _handler(call: Call, server: RemoteServer, raw: str) -> ToolHandler:
    async def run(args: dict[str, Any], _ctx: ToolContext) -> ToolOutcome:
        return await call(server, raw, args)

    return run


def model_name(label: str, raw: str) -> str:
    """The name the model knows a remote server's tool by (`remote_tools`' naming, for a
    tool named on its own: a `tool_choice`, a replayed `mcp_call`)."""
    [name] = model_names(RemoteServer(label, "").prefix, [raw])
    return name


def replayed_result(label: str, raw: str, text: str) -> str:
    """A replayed `mcp_call`'s output as the model first read it: fenced as untrusted."""
    return fence(text, f"{label}/{raw}", kind=RESULT_KIND)


def approval_id(call_id: str) -> str:
    """An `mcp_approval_request` item's id, derived from the held call's id so the
    answer finds its call without a table (as `function_call` items' ids are)."""
    return "mcpr_" + call_id


def call_of(approval_request_id: str) -> str | None:
    return approval_request_id[5:] or None if approval_request_id.startswith("mcpr_") else None


def execution_error(text: str) -> dict[str, Any]:
    return {"type": "mcp_tool_execution_error", "content": [{"type": "text", "text": text}]}


def error_json(error: Mapping[str, Any] | None) -> str | None:
    return None if error is None else json.dumps(error, separators=(",", ":"))
