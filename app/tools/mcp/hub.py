"""Every MCP server of COURIER_MCP_CONFIG: their connections, their tools in the registry,
and which profiles' sessions get them.

Boot waits for no server: each connects in its own task, and its tools join the registry
when its first listing arrives. A listing that really differs (list_changed, a server that
arrived late) replaces that server's toolset, and sessions pick the change up at their
next opening (app/agent/opening/lifecycle.py) as one named cache break. A server that goes
down keeps its last listing: its tools stay offered and fail with an error result, since a
toolbox that shrinks and grows with a flapping server would break every session's cache
each time, where a failed call costs one step.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict
from functools import partial
from typing import Any

from mcp_types import Tool as McpTool
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.config import Settings
from app.db.mcp_store import save_listing, stored_listings
from app.db.store import Store
from app.tools.mcp.adapter import server_tools, toolset
from app.tools.mcp.config import McpFile, key_allowlists
from app.tools.mcp.connection import McpConnection, Timeouts
from app.tools.mcp.launch import Limits
from app.tools.mcp.names import LeftOut
from app.tools.registry import Tool, ToolRegistry

log = logging.getLogger(__name__)
MAX_PORTIONS = 4096
"""(profile, owner) pairs remembered; past it each opening computes its own (a filter)."""


class McpHub:
    def __init__(
        self,
        mcp: McpFile,
        *,
        settings: Settings,
        registry: ToolRegistry,
        store: Store | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.listing_from: dict[str, str] = {}
        """`persisted` while a server's tools are the stored listing, `live` once it answered."""
        default = settings.default_profile()
        timeouts = Timeouts(
            connect_s=settings.mcp_connect_timeout_s, call_s=settings.mcp_call_timeout_s
        )
        limits = Limits(
            memory_bytes=default.tool_memory_bytes, file_size_bytes=default.tool_file_size_bytes
        )
        self.connections = {
            server.name: McpConnection(
                server,
                data_dir=settings.data_dir,
                url_allow=settings.mcp_url_allow,
                timeouts=timeouts,
                limits=limits,
                on_listing=self._listed,
            )
            for server in mcp.servers
        }
        self.tools: dict[str, list[Tool]] = {}
        self.left_out: dict[str, list[LeftOut]] = {}
        self._digests: dict[str, str] = {}
        self._by_profile = {
            profile.name: tuple(
                toolset(s.name) for s in mcp.servers if not profile.relay and s.offers(profile.name)
            )
            for profile in settings.all_profiles()
        }
        self._allowed = key_allowlists(settings)
        self._portions: dict[tuple[str, str], tuple[str, ...]] = {}
        registry.extra_toolsets = self.toolsets_for

    def toolsets_for(self, profile: str, owner: str) -> tuple[str, ...]:
        """The MCP toolsets a session of `profile` owned by `owner` gets: the servers that
        offer the profile, narrowed by the owner's key (a hidden server's tool is then an
        unknown tool to the session, and the server is never called)."""
        found = self._portions.get((profile, owner))
        if found is None:
            everything = self._by_profile.get(profile, ())
            allowed = self._allowed.get(owner)
            found = tuple(t for t in everything if allowed is None or t[4:] in allowed)
            if len(self._portions) < MAX_PORTIONS:
                self._portions[(profile, owner)] = found
        return found

    def start(self) -> None:
        self._offer_stored()
        for conn in self.connections.values():
            conn.start()

    def _offer_stored(self) -> None:
        """The listings kept from the last run, offered before any server answers: a
        restart is then no change to any session's tools (app/db/mcp_store.py)."""
        if self.store is None:
            return
        stored = stored_listings(self.store)
        for name, conn in self.connections.items():
            digest, tools = stored.get(name, ("", "[]"))
            if digest != conn.config.digest:
                continue  # another command or URL: another server's tools
            try:
                conn.listing = tuple(McpTool.model_validate(t) for t in json.loads(tools))
            except ValueError:
                log.warning("mcp %s: its stored listing is unreadable; waiting for it", name)
                continue
            self._take(conn, live=False)

    def _listed(self, conn: McpConnection) -> None:
        self._take(conn, live=True)

    def _save(self, conn: McpConnection) -> None:
        if self.store is None or conn.listing is None:
            return
        tools = json.dumps(
            [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in conn.listing]
        )
        saved = self.store.commit_off_loop(
            partial(
                save_listing, self.store, server=conn.name, digest=conn.config.digest, tools=tools
            )
        )
        saved.add_done_callback(partial(_log_failed_save, conn.name))

    async def aclose(self) -> None:
        await asyncio.gather(*(conn.aclose() for conn in self.connections.values()))

    def _take(self, conn: McpConnection, *, live: bool) -> None:
        tools, left_out = server_tools(conn)
        self.left_out[conn.name] = left_out
        self.listing_from[conn.name] = "live" if live else "persisted"
        digest = _digest(tools)
        if self._digests.get(conn.name) == digest:
            return  # a relist that found nothing new is no change and no cache break
        try:
            self.registry.replace_toolset(toolset(conn.name), tools)
        except ValueError as exc:
            conn.health.last_error = f"tools not offered: {exc}"
            return
        if conn.name in self._digests:
            conn.health.list_changes += 1
            log.info("mcp %s: its tools changed (%d tools)", conn.name, len(tools))
        self._digests[conn.name] = digest
        self.tools[conn.name] = tools
        if live:
            self._save(conn)

    def status(self) -> list[dict[str, Any]]:
        """Each server as the admin route shows it: names only, never env or header values."""
        return [self._status(conn) for conn in self.connections.values()]

    def _status(self, conn: McpConnection) -> dict[str, Any]:
        config = conn.config
        health = asdict(conn.health)
        return {
            "name": conn.name,
            "transport": config.transport,
            **health,
            "approval": config.approval,
            "profiles": list(config.profiles) if config.profiles is not None else None,
            "command": os.path.basename(config.command) if config.command else None,
            "args_count": len(config.args),
            "env_names": [name for name, _ in config.env],
            "header_names": [name for name, _ in config.headers],
            "tools": [
                {"name": t.name, "read_only": t.read_only, "approval": t.approval}
                for t in self.tools.get(conn.name, [])
            ],
            "left_out": [asdict(item) for item in self.left_out.get(conn.name, [])],
            "listing_from": self.listing_from.get(conn.name),
        }


class McpCollector(Collector):
    """The servers' health as Prometheus series, read when scraped: a call pays nothing
    for them. Labels are the configured server names, a bounded set."""

    def __init__(self, hub: McpHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        calls = CounterMetricFamily(
            "courier_mcp_calls",
            "MCP tool calls by server and outcome",
            labels=["server", "outcome"],
        )
        up = GaugeMetricFamily("courier_mcp_server_up", "1 while connected", labels=["server"])
        reconnects = CounterMetricFamily(
            "courier_mcp_reconnects", "Connections lost or refused", labels=["server"]
        )
        changes = CounterMetricFamily(
            "courier_mcp_list_changes", "Listings that changed the tools", labels=["server"]
        )
        for name, conn in self.hub.connections.items():
            health = conn.health
            for outcome, count in health.calls.items():
                calls.add_metric([name, outcome], count)
            up.add_metric([name], 1.0 if health.state == "ready" else 0.0)
            reconnects.add_metric([name], health.reconnects)
            changes.add_metric([name], health.list_changes)
        yield from (calls, up, reconnects, changes)


def _log_failed_save(server: str, saved: asyncio.Future[None]) -> None:
    if not saved.cancelled() and (exc := saved.exception()) is not None:
        # The live listing is offered all the same; only the next restart lacks it.
        log.warning("mcp %s: its listing was not stored: %s", server, exc)


def _digest(tools: list[Tool]) -> str:
    shape = [
        [t.name, t.description, t.parameters, t.read_only, t.approval]
        for t in sorted(tools, key=lambda tool: tool.name)
    ]
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()
