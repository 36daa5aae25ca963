"""A Responses request's remote `mcp` tools made ready before its turn: each URL judged by
the egress policy (a 400 naming the field, before anything connects), each server's
tools listed (or the listing an earlier response of the chain made), and the listed
tools bound to calls that reach the server.

A listing is kept the way OpenAI keeps it: in the conversation. A continued chain finds
the `mcp_list_tools` item an earlier stored response returned for the same label and URL
and lists nothing; the client gets no new item. A server that fails to list yields an
item carrying `error`, and the turn runs without its tools.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from app.api.http.errors import ApiError
from app.api.responses.translate import Translated
from app.api.responses.wire import ResponseCreateRequest, new_id
from app.config import Settings
from app.db import session_query as q
from app.db.store import Store
from app.security.ssrf import AddressRefused, ResolutionFailed, resolve_and_check
from app.tools.mcp.remote import (
    NO_REMOTE_TOOLS,
    Listing,
    RemoteServer,
    RemoteTools,
    remote_tools,
)

CHAIN_HOPS = 64
"""How far back a chain is searched for a listing; past it, the server is listed again."""


@dataclass(frozen=True, slots=True)
class RemoteMcp:
    """The settings the remote tool obeys (read once, like every setting)."""

    enabled: bool = True
    url_allow: tuple[str, ...] = ()
    connect_timeout_s: float = 30.0
    call_timeout_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RemoteMcp:
        return cls(
            enabled=settings.mcp_remote,
            url_allow=settings.mcp_url_allow,
            connect_timeout_s=settings.mcp_connect_timeout_s,
            call_timeout_s=settings.mcp_call_timeout_s,
        )

    async def check_urls(self, translated: Translated) -> None:
        """Refuse a server the egress policy forbids, naming the field and the setting
        that would allow it (every one, when the operator turned remote servers off). A
        name that does not resolve is the listing's error."""
        for index, server in translated.remote:
            if not self.enabled:
                raise ApiError(
                    400,
                    "this server does not connect to MCP servers a request names "
                    "(COURIER_MCP_REMOTE=false); its own tools are offered instead",
                    param=f"tools[{index}].type",
                    code="unsupported_parameter",
                )
            parts = urlsplit(server.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            try:
                await resolve_and_check(parts.hostname or "", port, allow=self.url_allow)
            except AddressRefused as refused:
                raise ApiError(
                    400,
                    f"the MCP server's address is refused: {refused} (an operator may "
                    "allow it with COURIER_MCP_URL_ALLOW=host:port)",
                    param=f"tools[{index}].server_url",
                    code="mcp_server_refused",
                ) from None
            except ResolutionFailed:
                pass

    async def prepare(
        self, translated: Translated, store: Store, request: ResponseCreateRequest
    ) -> tuple[RemoteTools, tuple[dict[str, Any], ...]]:
        """The turn's remote tools, and the `mcp_list_tools` items this response made
        (none for a listing an earlier response of its chain returned)."""
        servers = tuple(server for _, server in translated.remote)
        if not servers:
            if not translated.approved:
                return NO_REMOTE_TOOLS, ()
            return RemoteTools(approved=translated.approved), ()
        previous = request.previous_response_id
        known = chain_listings(store, previous, servers) if previous else {}
        # The SDK costs a second or two to import: once, off the event loop.
        client: Any = await asyncio.to_thread(
            importlib.import_module, "app.tools.mcp.remote_client"
        )
        fresh = await asyncio.gather(
            *(
                client.list_tools(
                    server,
                    item_id=new_id("mcpl"),
                    allow=self.url_allow,
                    timeout_s=self.connect_timeout_s,
                )
                for server in servers
                if server.label not in known
            )
        )
        listings = {**known, **{listing.label: listing for listing in fresh}}
        call = partial(client.call_tool, allow=self.url_allow, timeout_s=self.call_timeout_s)
        tools = remote_tools(servers, listings, call=call, approved=translated.approved)
        return tools, tuple(listing.item() for listing in fresh)


def chain_listings(
    store: Store, previous: str, servers: tuple[RemoteServer, ...]
) -> dict[str, Listing]:
    """The listings earlier responses of the chain returned for these servers (same
    label, same URL), newest first; a failed listing is never reused."""
    wanted = {server.label: server.url for server in servers}
    found: dict[str, Listing] = {}
    response_id: str | None = previous
    for _ in range(CHAIN_HOPS):
        if response_id is None or len(found) == len(wanted):
            break
        row = q.get_response(store, response_id=response_id)
        if row is None or row.retracted:
            break
        body = json.loads(row.body)
        urls = _declared_urls(body.get("tools") or [])
        for item in body.get("output") or []:
            label = item.get("server_label")
            if (
                item.get("type") == "mcp_list_tools"
                and label in wanted
                and label not in found
                and urls.get(label) == wanted[label]
                and not item.get("error")
            ):
                found[label] = Listing.from_item(item)
        response_id = row.previous_response_id
    return found


def _declared_urls(tools: list[Mapping[str, Any]]) -> dict[str, str]:
    return {
        str(t.get("server_label")): str(t.get("server_url"))
        for t in tools
        if t.get("type") == "mcp"
    }
