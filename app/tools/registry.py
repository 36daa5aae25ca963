"""The tool registry: schemas the model sees, and one dispatch that never raises.

A malformed call is the model's mistake, so it becomes an error result the model reads on
its next iteration. An exception escaping a handler is our bug: it is logged with its
traceback, and the model still gets a result so the transcript stays valid.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.config import ToolQuota
from app.db.store import STORE_FAILURES, Store
from app.providers.base import Image, ToolCall, ToolSpec
from app.tools.call_repair import coerce_arguments, resolve_tool_name
from app.tools.capacity import ToolSlots

log = logging.getLogger(__name__)


class ToolError(Exception):
    """A failure the model should read and can act on (bad path, missing file, ...)."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    session_id: str
    workspace: Path
    owner: str = ""
    """The API principal's fingerprint: memory and session search are scoped to it."""
    end_user: str = ""
    """The session's end user under that key ("" for none): memory and session search see
    only this end user's records, never another's (app/api/http/end_users.py)."""
    bound_session: str | None = None
    """Set when a token bound to this session runs the turn: session search then sees this
    session only, as the token's routes do. Memory stays the end user's: notes are the
    person's across their sessions (this session's prompt already holds them), not another
    session's record."""
    store: Store | None = None
    network: bool = False
    """Whether the profile lets tools reach the network (terminal sandbox, web_fetch)."""
    terminal_backend: Literal["sandbox", "local"] = "sandbox"
    terminal_timeout_s: float = 120.0
    fetch_allow_hosts: tuple[str, ...] = ()
    """Hosts or CIDRs web_fetch may reach even though they are private or loopback."""
    quota: ToolQuota = field(default_factory=ToolQuota)
    """Workspace bytes, disk reserve and per-call limits (app/tools/workspace_quota.py)."""


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = field(default=(), kw_only=True)
    """Images for the model beside `content` (an MCP tool's), stored with the result;
    keyword-only, so the subclasses' positional fields keep their places."""


ToolHandler = Callable[[dict[str, Any], ToolContext], Awaitable[str | ToolOutcome]]
"""A tool's work; a plain string is a successful result (an MCP server says itself
whether its result is an error, so its handler returns the outcome whole)."""
UnitHandler = Callable[[dict[str, Any], ToolContext], str]
"""A tool's work when it is only store reads and writes, done synchronously."""
Access = Literal["read", "write"]
Approval = Literal["judge", "allow", "ask", "ask_always"]
"""How the approval ladder treats a call: `judge` reads its command and paths (built-in
tools); `allow` runs it (an MCP tool its server marks read-only, or a server the operator
marked `approval: never`); `ask` asks a human unless bypassed or granted (an MCP tool
that may change things); `ask_always` asks every time, like a protected write (an MCP
server the operator marked `approval: always`)."""


@dataclass(frozen=True, slots=True)
class PathClaim:
    """A canonical path a call touches, and how; the scheduler orders conflicting claims."""

    path: Path
    access: Access


PathScope = Callable[[dict[str, Any], ToolContext], list[PathClaim] | None]
"""The paths a call will touch, or None when they cannot be determined (a barrier)."""

Availability = Callable[[], bool]


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    read_only: bool = True
    """Touches nothing but what it reads: safe to run beside any other read-only call."""
    path_scope: PathScope | None = None
    available: Availability | None = None
    """A cheap probe (binary present, service reachable); None means always available."""
    toolset: str = "core"
    spill_exempt: bool = False
    """Never relocate this tool's output to a file (the file reader: recovery must not recurse)."""
    in_unit: UnitHandler | None = None
    """The same work as `handler`, for a turn to run inside the transaction that records
    its result, on the store's writer thread: one commit for the change and its result
    where there were two (and a thread hop). It must leave its writes whole: it raises
    before its last write or not at all, since what it wrote commits with the result."""
    spawns_process: bool = False
    """Runs a process (a sandbox, a command): it waits for one of the machine's tool slots
    (app/tools/capacity.py) before it runs. Plugin tools that spawn should set it."""

    approval: Approval = "judge"

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments as an object, or a message explaining why they are unusable."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return f"arguments must be a JSON object, got {type(value).__name__}"
    return value


AVAILABILITY_TTL_S = 30.0
FLAKE_GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class _Probe:
    offered: bool
    at: float
    last_success: float | None


@dataclass
class AvailabilityCache:
    """Cached availability, asymmetric on purpose.

    A failure within 60 s of the last success is ignored (the tool stays offered and the
    next call re-probes): one flaky probe must not silently shrink the toolbox, which
    would also change the session's schema bytes and break the prompt cache.
    """

    clock: Callable[[], float] = time.monotonic
    _probes: dict[str, _Probe] = field(default_factory=dict)

    def available(self, tool: Tool) -> bool:
        if tool.available is None:
            return True
        now = self.clock()
        previous = self._probes.get(tool.name)
        if previous is not None and now - previous.at < AVAILABILITY_TTL_S:
            return previous.offered
        try:
            ok = bool(tool.available())
        except Exception:
            log.exception("availability probe for %s failed", tool.name)
            ok = False
        last_success = now if ok else (previous.last_success if previous else None)
        in_grace = not ok and last_success is not None and now - last_success < FLAKE_GRACE_S
        # A forgiven failure is not cached, so the very next look probes again.
        at = float("-inf") if in_grace else now
        self._probes[tool.name] = _Probe(offered=ok or in_grace, at=at, last_success=last_success)
        return ok or in_grace


MAX_VIEWS = 64
"""Restricted views kept per registry (one per distinct session allowlist)."""


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        slots: ToolSlots | None = None,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._views: dict[frozenset[str], ToolRegistry] = {}
        self.version = 0
        """Bumped when a toolset is replaced: a name may then mean another schema."""
        self.extra_toolsets: Callable[[str, str], tuple[str, ...]] = _no_extra_toolsets
        """Toolsets a session gets beyond its profile's list, by profile name and owner:
        the MCP servers that offer the profile and the owner's key allows
        (app/tools/mcp/hub.py)."""
        self.availability = AvailabilityCache(clock=clock)
        self.slots = slots
        """The server's places for process-spawning calls; None = unbounded (unit tests)."""
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        self._views.clear()

    def replace_toolset(self, toolset: str, tools: Iterable[Tool]) -> None:
        """Swap `toolset`'s tools for `tools` (an MCP server's new listing).

        A new dict replaces the old one rather than changing it: openings read the registry
        on the store's writer thread while this runs on the event loop, so a reader sees
        the old set or the new one, never half of each."""
        kept = {name: tool for name, tool in self._tools.items() if tool.toolset != toolset}
        for tool in tools:
            if tool.name in kept:
                raise ValueError(f"tool {tool.name!r} is already registered by another toolset")
            kept[tool.name] = tool
        self._tools = kept
        self._views = {}
        self.version += 1

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def restricted_to(self, names: Iterable[str]) -> ToolRegistry:
        """A view holding only `names`: a session's snapshot is what it may run, not only
        what it is shown. Resolving against the whole registry let a model that named a
        tool outside its toolsets run it anyway. Availability is shared with this one."""
        allowed = frozenset(names)
        view = self._views.get(allowed)
        # Memoised per allowlist (every turn asks; sessions share a few snapshots), and
        # dropped when a tool registers, which would change what the names resolve to.
        if view is None:
            view = ToolRegistry(
                (tool for name, tool in self._tools.items() if name in allowed), slots=self.slots
            )
            view.availability = self.availability
            if len(self._views) >= MAX_VIEWS:
                self._views.clear()
            self._views[allowed] = view
        return view

    def with_tools(self, tools: Iterable[Tool]) -> ToolRegistry:
        """A new view: this one's tools plus `tools` (one request's remote MCP tools),
        which shadow a tool of the same name. Not memoised: it lives for one turn."""
        extra = {tool.name: tool for tool in tools}
        kept = (tool for name, tool in self._tools.items() if name not in extra)
        view = ToolRegistry((*kept, *extra.values()), slots=self.slots)
        view.availability = self.availability
        return view

    def names(self, toolsets: Iterable[str] | None = None) -> list[str]:
        wanted = set(toolsets) if toolsets is not None else None
        return sorted(
            name
            for name, tool in self._tools.items()
            if (wanted is None or tool.toolset in wanted) and self.availability.available(tool)
        )

    def specs(self, toolsets: Iterable[str] | None = None) -> tuple[ToolSpec, ...]:
        # Sorted by name so the serialised schema list is identical on every request.
        return tuple(self._tools[name].spec() for name in self.names(toolsets))

    async def run(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(call.name)
        if tool is None:
            # An empty name gets a short rejection; listing the catalog there invites the
            # model to guess again. An invented one gets the catalog to choose from.
            message = resolve_tool_name(call.name, self.names()).message
            return ToolOutcome(message or f"error: unknown tool {call.name!r}", True)
        args = parse_arguments(call.arguments)
        if isinstance(args, str):
            return ToolOutcome(f"error: {call.name}: {args}", True)
        return await self.invoke(tool, args, ctx)

    async def invoke(self, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        """Run `tool`; one that spawns a process first waits for a tool slot, so its own
        timeout starts when it runs, not while it queues."""
        if tool.spawns_process and self.slots is not None:
            async with self.slots.hold():
                return await self._invoke(tool, args, ctx)
        return await self._invoke(tool, args, ctx)

    async def _invoke(self, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        try:
            result = await tool.handler(coerce_arguments(args, tool.parameters), ctx)
            return result if isinstance(result, ToolOutcome) else ToolOutcome(result)
        except Exception as exc:
            return _failed(tool, exc)

    def invoke_in_unit(self, tool: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        """`invoke` for a tool's `in_unit` work, inside the caller's store unit."""
        assert tool.in_unit is not None
        try:
            return ToolOutcome(tool.in_unit(coerce_arguments(args, tool.parameters), ctx))
        except STORE_FAILURES:
            raise  # the unit itself failed: it rolls back whole, and the turn says so
        except Exception as exc:
            return _failed(tool, exc)


def _no_extra_toolsets(_profile: str, _owner: str) -> tuple[str, ...]:
    return ()


def _failed(tool: Tool, exc: Exception) -> ToolOutcome:
    """A tool's failure as its result: its own words for a ToolError, else (logged, with
    the traceback being handled) a plain internal error."""
    if isinstance(exc, ToolError):
        return ToolOutcome(f"error: {exc}", True)
    log.exception("tool %s failed", tool.name)
    return ToolOutcome(f"error: {tool.name} failed with an internal error", True)
