"""One MCP server's connection: an owner task that connects, lists, listens and
reconnects with backoff, and calls made from the callers' own tasks.

The owner holds the SDK's `Client` for its whole life and does nothing else: a call run
in the task that entered the client is cancelled by the SDK when an HTTP server dies
mid-call (the caller sees CancelledError, indistinguishable from its own cancellation),
while from any other task it fails as an ordinary error. Calls never wait on the owner:
a server that is down answers at once with an error result, and a server that stops
answering is cut off by the call timeout and, after a few of those, by a breaker, so no
turn stalls on it and no other session notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.session import IncomingMessage
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Tool,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from app.security.pinned_http import PinnedTransport
from app.security.ssrf import SSRFError
from app.tools.mcp.config import ServerConfig
from app.tools.mcp.launch import Limits, launch, stderr_log
from app.tools.mcp.results import failed, to_outcome
from app.tools.registry import ToolOutcome

log = logging.getLogger(__name__)
logging.getLogger("mcp").setLevel(logging.WARNING)  # its parse tracebacks are noise here
# A line per HTTP request to a server (several per call) would drown the per-turn line.
logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))

State = Literal["connecting", "ready", "backoff", "stopped"]
Outcome = Literal["ok", "tool_error", "timeout", "unavailable", "closed", "protocol"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "tool_error", "timeout", "unavailable", "closed", "protocol")
MAX_PAGES = 20
RELIST_S = 300.0
"""An idle server is re-listed this often: it also notices an HTTP server that went away."""
RELIST_MIN_S = 1.0
"""A flood of list_changed notifications relists at most this often."""
MAX_BACKOFF_S = 60.0
BREAKER_FAILURES = 3
BREAKER_OPEN_S = 30.0
MAX_IN_FLIGHT = 8
CLOSE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect_s: float
    call_s: float


@dataclass
class Health:
    """What the status route and the logs say about a server."""

    state: State = "connecting"
    protocol_version: str | None = None
    server_info: dict[str, str] = field(default_factory=dict)
    connected_at: float | None = None
    reconnects: int = 0
    next_attempt_at: float | None = None
    breaker_open_until: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    list_changes: int = 0
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))


def short_error(exc: BaseException) -> str:
    """The innermost error, in one line: the SDK wraps connect failures in groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


class McpConnection:
    def __init__(
        self,
        config: ServerConfig,
        *,
        data_dir: Path,
        url_allow: tuple[str, ...],
        timeouts: Timeouts,
        limits: Limits | None,
        on_listing: Callable[[McpConnection], None],
    ) -> None:
        self.config = config
        self.name = config.name
        self.data_dir = data_dir
        self.url_allow = url_allow
        self.timeouts = timeouts
        self.limits = limits
        self.on_listing = on_listing
        self.health = Health()
        self.listing: tuple[Tool, ...] | None = None
        self._client: Client | None = None
        self._wake = asyncio.Event()
        self._stale = False
        self._dead = False
        self._stopping = False
        self._failures = 0
        self._failures_in_a_row = 0
        self._last_list = -math.inf
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._task: asyncio.Task[None] | None = None

    # -- the owner ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._own(), name=f"mcp {self.name}")

    async def aclose(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT_S)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _own(self) -> None:
        while not self._stopping:
            self._set_state("connecting")
            try:
                await self._session()
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stopping or (current is not None and current.cancelling()):
                    raise
                # The SDK cancels its own scope when an HTTP server dies under the owner.
                self._down("the connection was cut")
            except Exception as exc:
                self._down(why_down(exc))
            finally:
                self._client = None
            if self._stopping:
                break
            await self._backoff()
        self._set_state("stopped")

    async def _session(self) -> None:
        self._dead = self._stale = False
        async with contextlib.AsyncExitStack() as stack:
            # The connect deadline covers the handshake and the first listing only; it is
            # lifted once the server is ready (a scope cannot be left halfway through).
            with anyio.CancelScope(
                deadline=anyio.current_time() + self.timeouts.connect_s
            ) as scope:
                client = await stack.enter_async_context(self._client_for(stack))
                await self._relist(client)
                scope.deadline = math.inf
                self._ready(client)
                async with anyio.create_task_group() as group:
                    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                        group.start_soon(self._listen, client)
                    await self._serve(client)
                    group.cancel_scope.cancel()
            if scope.cancelled_caught and self._client is None:
                raise TimeoutError(f"no answer within {self.timeouts.connect_s:g} s of connecting")

    def _client_for(self, stack: contextlib.AsyncExitStack) -> Client:
        common: dict[str, Any] = {
            "mode": "auto",
            "cache": None,  # a listing must be the server's, not a cached page
            "message_handler": self._on_message,
            "read_timeout_seconds": self.timeouts.call_s,
        }
        if self.config.transport == "stdio":
            spec = launch(self.config, data_dir=self.data_dir, limits=self.limits)
            errlog: IO[str] = stack.enter_context(stderr_log(self.data_dir, self.name))
            params = StdioServerParameters(
                command=spec.command, args=list(spec.args), env=spec.env, cwd=spec.cwd
            )
            return Client(stdio_client(params, errlog=errlog), **common)  # type: ignore[arg-type]
        http = httpx2.AsyncClient(
            transport=PinnedTransport(self.url_allow),
            headers=dict(self.config.headers),
            trust_env=False,
            timeout=httpx2.Timeout(self.timeouts.connect_s, read=RELIST_S),
        )
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(self.config.url, http_client=http), **common)

    async def _serve(self, client: Client) -> None:
        """Wait for a change, a relist, death or stop; the owner's whole job once ready."""
        while True:
            with anyio.move_on_after(RELIST_S) as idle:
                await self._wake.wait()
            self._wake.clear()
            if self._stopping or self._dead:
                return
            if self._stale or idle.cancelled_caught:
                wait = self._last_list + RELIST_MIN_S - time.monotonic()
                if wait > 0:
                    await anyio.sleep(wait)
                self._stale = False
                await self._relist(client)

    async def _listen(self, client: Client) -> None:
        """The 2026-07-28 path for list_changed: a subscription, re-opened when lost."""
        failures = 0
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    failures = 0
                    self._mark_stale()  # no replay: what changed while away is unknown
                    async for _event in subscription:
                        self._mark_stale()
                return
            except (ListenNotSupportedError, MCPError, TimeoutError):
                return  # the server does not offer it; legacy notifications still arrive
            except SubscriptionLost:
                failures += 1
                await anyio.sleep(min(MAX_BACKOFF_S, 2.0**failures))

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, ToolListChangedNotification):
            self._mark_stale()

    def _mark_stale(self) -> None:
        self._stale = True
        self._wake.set()

    async def _relist(self, client: Client) -> None:
        tools = await list_pages(client)
        self._last_list = time.monotonic()
        self.listing = tuple(tools)
        self.on_listing(self)

    def _ready(self, client: Client) -> None:
        self._client = client
        self._failures = 0
        health = self.health
        health.protocol_version = client.protocol_version
        info = client.server_info
        health.server_info = {"name": info.name, "version": info.version} if info else {}
        health.connected_at = time.time()
        health.next_attempt_at = None
        self._set_state("ready")
        count = len(self.listing or ())
        log.info("mcp %s: ready (%d tools, %s)", self.name, count, client.protocol_version)

    def _down(self, why: str) -> None:
        if self._stopping:
            return
        self.health.last_error = why
        self.health.last_error_at = time.time()
        self.health.reconnects += 1
        self._failures += 1

    async def _backoff(self) -> None:
        delay = min(MAX_BACKOFF_S, 2.0 ** (self._failures - 1)) * random.uniform(0.5, 1.0)
        self.health.next_attempt_at = time.time() + delay
        self._set_state("backoff")
        log.warning("mcp %s: down (%s); retry in %.1f s", self.name, self.health.last_error, delay)
        with anyio.move_on_after(delay):
            while not self._stopping:
                await self._wake.wait()
                self._wake.clear()

    def _set_state(self, state: State) -> None:
        self.health.state = state

    # -- calls, in the caller's task ------------------------------------------------------

    async def call(self, raw: str, args: dict[str, Any]) -> tuple[ToolOutcome, Outcome]:
        """The tool's result, or an error result saying why there is none; never raises
        but for the caller's own cancellation."""
        timeout = self.config.timeout_s or self.timeouts.call_s
        client = self._client
        opened = self.health.breaker_open_until
        if opened is not None and time.time() < opened:
            return self._unavailable(raw, "it failed several calls in a row")
        if client is None or self.health.state != "ready":
            return self._unavailable(raw, self.health.last_error or "not connected yet")
        async with self._slots:
            try:
                result = await client.call_tool(raw, args, read_timeout_seconds=timeout)
            except MCPError as exc:
                return self._call_failed(raw, exc, timeout)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                self._lost(short_error(exc))
                return self._closed(raw)
            except Exception as exc:  # the SDK's own failures (a result it cannot parse, ...)
                log.warning("mcp %s: call to %s failed: %s", self.name, raw, short_error(exc))
                text = f"MCP server {self.name}'s answer could not be used: {short_error(exc)}"
                return self._count(failed(self.name, raw, text), "protocol")
        self._failures_in_a_row = 0
        self.health.breaker_open_until = None
        outcome: Outcome = "tool_error" if result.is_error else "ok"
        return self._count(to_outcome(result, server=self.name, tool=raw), outcome)

    def _call_failed(self, raw: str, exc: MCPError, timeout: float) -> tuple[ToolOutcome, Outcome]:
        if exc.code == CONNECTION_CLOSED:
            self._lost(short_error(exc))
            return self._closed(raw)
        if exc.code == REQUEST_TIMEOUT:
            self._trip()
            text = (
                f"MCP server {self.name} did not answer within {timeout:g} s; the call may "
                "still complete on the server, so its effect is unknown"
            )
            return self._count(failed(self.name, raw, text), "timeout")
        text = f"MCP server {self.name} refused the call: {exc.error.message}"[:1000]
        return self._count(failed(self.name, raw, text), "protocol")

    def _closed(self, raw: str) -> tuple[ToolOutcome, Outcome]:
        self._trip()
        text = (
            f"MCP server {self.name} stopped during this call (it is being restarted); "
            "its effect is unknown"
        )
        return self._count(failed(self.name, raw, text), "closed")

    def _unavailable(self, raw: str, why: str) -> tuple[ToolOutcome, Outcome]:
        text = f"MCP server {self.name} is unavailable ({why}); it is being retried"
        return self._count(failed(self.name, raw, text), "unavailable")

    def _lost(self, why: str) -> None:
        """A stdio server that died while idle is only seen by the next call: wake the
        owner to reconnect."""
        if not self._dead:
            self._dead = True
            self.health.last_error = f"stopped: {why}"
            self.health.last_error_at = time.time()
            self._wake.set()

    def _trip(self) -> None:
        self._failures_in_a_row += 1
        if self._failures_in_a_row >= BREAKER_FAILURES:
            self.health.breaker_open_until = time.time() + BREAKER_OPEN_S
            self._failures_in_a_row = 0

    def _count(self, outcome: ToolOutcome, kind: Outcome) -> tuple[ToolOutcome, Outcome]:
        self.health.calls[kind] = self.health.calls.get(kind, 0) + 1
        return outcome, kind


async def list_pages(client: Client) -> list[Tool]:
    """Every page of the server's `tools/list`, up to MAX_PAGES (a server that pages
    forever must not hold its caller)."""
    tools: list[Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def why_down(exc: BaseException) -> str:
    """Why a connection failed, in one line; an address the egress policy refused names
    the setting that would allow it."""
    inner = exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    if isinstance(inner, SSRFError):
        return f"{inner} (an operator may allow it with COURIER_MCP_URL_ALLOW=host:port)"
    return short_error(inner)
