"""Talking to a Responses request's remote MCP server: list its tools, call one.

A connection per listing and per call, made in a task of its own: the SDK cancels the
task that entered its client when an HTTP server dies mid-call, which would read as the
turn's own cancellation (connection.py says more). A remote server is reached through
the same pinned transport as a configured one, so its URL passes the egress policy on
every request, redirects included. The caller's headers go to the server and nowhere
else: no log line here names them, and errors are the SDK's words, not the request's.

Importing this module imports the SDK (a second or two): the Responses serving imports
it off the event loop, on the first request that declares a remote server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import Tool

from app.security.pinned_http import PinnedTransport
from app.tools.mcp.connection import list_pages, why_down
from app.tools.mcp.remote import (
    MAX_OUTPUT_CHARS,
    ListedTool,
    Listing,
    RemoteOutcome,
    RemoteServer,
    execution_error,
)
from app.tools.mcp.results import KIND, result_images, result_text
from app.tools.untrusted import fence

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConnectionCut(Exception):
    """The SDK cancelled its own scope: the server went away mid-exchange."""


async def _exchange(
    server: RemoteServer,
    *,
    allow: tuple[str, ...],
    timeout_s: float,
    work: Callable[[Client], Awaitable[T]],
) -> T:
    async def own() -> T:
        with anyio.fail_after(timeout_s):
            async with httpx2.AsyncClient(
                transport=PinnedTransport(allow),
                headers=dict(server.headers),
                trust_env=False,
                timeout=httpx2.Timeout(timeout_s),
            ) as http:
                transport = streamable_http_client(server.url, http_client=http)
                async with Client(
                    transport, mode="auto", cache=None, read_timeout_seconds=timeout_s
                ) as client:
                    return await work(client)

    task = asyncio.create_task(own(), name=f"mcp remote {server.label}")
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        raise ConnectionCut("the connection was cut") from None


async def list_tools(
    server: RemoteServer, *, item_id: str, allow: tuple[str, ...], timeout_s: float
) -> Listing:
    """The server's tools, or a listing that carries why there are none: a server that
    fails to list costs the turn its tools, never the turn."""

    try:
        tools = await _exchange(server, allow=allow, timeout_s=timeout_s, work=list_pages)
    except Exception as exc:
        why = why_down(exc)
        log.info("mcp remote %s: listing failed: %s", server.label, why)
        return Listing(item_id, server.label, error=f"could not list tools: {why}")
    return Listing(item_id, server.label, tuple(_listed(t) for t in tools))


REDACT_MIN_CHARS = 8
"""Shorter header values (a team name, `1`) would redact ordinary words."""


def _redacted(text: str, server: RemoteServer) -> str:
    """The result without the caller's header values: a server that echoes the token it
    was sent must not put it in the log, the prompt or the client's output."""
    for _name, value in server.headers:
        token = value.removeprefix("Bearer ").strip()
        for secret in {value, token}:
            if len(secret) >= REDACT_MIN_CHARS:
                text = text.replace(secret, "[redacted]")
    return text


def _listed(tool: Tool) -> ListedTool:
    hints = tool.annotations
    annotations = hints.model_dump(by_alias=True, exclude_none=True) if hints else None
    return ListedTool(
        name=tool.name,
        description=tool.description,
        input_schema=dict(tool.input_schema),
        annotations=annotations or None,
    )


async def call_tool(
    server: RemoteServer,
    raw: str,
    args: dict[str, Any],
    *,
    allow: tuple[str, ...],
    timeout_s: float,
) -> RemoteOutcome:
    """The call's result, or an error result saying why there is none; never raises but
    for the caller's own cancellation."""
    source = f"{server.label}/{raw}"
    try:
        result = await _exchange(
            server,
            allow=allow,
            timeout_s=timeout_s,
            work=lambda client: client.call_tool(raw, args, read_timeout_seconds=timeout_s),
        )
    except MCPError as exc:
        text = f"MCP server {server.label} refused the call: {exc.error.message}"[:1000]
        error = {"type": "mcp_protocol_error", "code": exc.code, "message": exc.error.message}
        fenced = fence(f"error: {text}", source, kind=KIND)
        return RemoteOutcome(fenced, True, "protocol", server=server.label, tool=raw, error=error)
    except Exception as exc:
        why = why_down(exc)
        if isinstance(exc, TimeoutError):
            why = f"no answer within {timeout_s:g} s; the call's effect is unknown"
        text = f"MCP server {server.label} could not be called: {why}"
        error = {"type": "mcp_protocol_error", "code": -32000, "message": why}
        fenced = fence(f"error: {text}", source, kind=KIND)
        kind = "timeout" if isinstance(exc, TimeoutError) else "unavailable"
        return RemoteOutcome(fenced, True, kind, server=server.label, tool=raw, error=error)
    text = _redacted(result_text(result), server)
    fenced = fence(text, source, kind=KIND)
    # The images its text calls `attached` go to the model like a configured server's.
    images = result_images(result)
    if result.is_error:
        error = execution_error(text[:MAX_OUTPUT_CHARS])
        return RemoteOutcome(
            fenced, True, "tool_error", server.label, raw, error=error, images=images
        )
    output = text[:MAX_OUTPUT_CHARS]
    return RemoteOutcome(fenced, False, "ok", server.label, raw, output=output, images=images)
