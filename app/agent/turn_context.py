"""What one turn runs with (`TurnContext`, frozen) and what it accumulates (`TurnState`).

Built whole by the session's lifecycle (`app/agent/opening/lifecycle.py`) before the turn starts;
the loop and its side concerns (fallback, steering, the context window) read it and,
where they must change it (a fallback's route), replace it instead of patching it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.agent.accumulate import ReplyBuilder
from app.agent.approvals import ApprovalGate, turn_guard
from app.agent.context.cache_planner import StablePrefixRegistry
from app.agent.context.compressor import Compressor
from app.agent.context.context_files import ContextWatch
from app.agent.context.window import SessionWindow
from app.agent.cost.budget import SpendGuard
from app.agent.events import ExitReason, TurnError, TurnEvent, TurnFinished
from app.agent.tool_step import BatchRunner
from app.config import Profile
from app.db.store import Store
from app.observe.metrics import Metrics
from app.providers.base import (
    OutputFormat,
    Provider,
    SamplingParams,
    ToolCall,
    ToolChoice,
    ToolSpec,
)
from app.providers.pricing import Cost, PriceOverride
from app.providers.usage import Usage
from app.tools.mcp.remote import NO_REMOTE_TOOLS, RemoteTools
from app.tools.registry import ToolContext, ToolRegistry


@dataclass(frozen=True, slots=True)
class Route:
    profile: Profile
    provider: Provider
    price: PriceOverride | None = None


class Mailbox:
    """Messages for a running turn, each with a future its sender waits on."""

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []

    def put(self, text: str) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((text, done))
        return done

    def take(self) -> list[tuple[str, asyncio.Future[None]]]:
        """Every waiting message whose sender still waits (a withdrawn one is skipped)."""
        taken, self._waiting = self._waiting, []
        return [(text, done) for text, done in taken if not done.done()]


@dataclass(frozen=True)
class TurnContext:
    store: Store
    provider: Provider
    tools: ToolRegistry
    profile: Profile
    session_id: str
    owner: str
    lease: str
    turn_id: str
    workspace: Path
    sampling: SamplingParams
    emit: Callable[[TurnEvent], None]
    spend: SpendGuard
    metrics: Metrics
    tool_specs: tuple[ToolSpec, ...] = ()
    """The session's frozen tool snapshot: the schemas sent on every request."""
    stable_tier: str = ""
    """The stable tier this session's prompt starts with; each call proves it again, since
    a compaction rebuilds the prompt."""
    prefixes: StablePrefixRegistry | None = None
    price_override: PriceOverride | None = None
    compressor: Compressor | None = None
    rebuild_prompt: Callable[[], str] = lambda: ""
    """Rebuild the session's system prompt from its stored inputs (used by compaction)."""
    client_tools: frozenset[str] = frozenset()
    """Names of the tools the client declared: a call to one ends the turn, the client runs it."""
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool | None = None
    output_format: OutputFormat | None = None
    """The client's `response_format`: the final answer is checked against it."""
    fallbacks: tuple[Route, ...] = ()
    """The profile's fallback chain still unused this turn, next first."""
    mailbox: Mailbox = field(default_factory=Mailbox)
    """Steering messages sent while the turn runs (see app/agent/steer.py)."""
    gate: ApprovalGate | None = None
    """Where calls that need a human wait; None refuses them (missing state means deny)."""
    end_user: str = ""
    """The session's end user under `owner` ("" for none): the tools' and the ledger's scope."""
    bound_session: str | None = None
    """The session a session-bound token that runs the turn is bound to (None otherwise)."""
    remote: RemoteTools = NO_REMOTE_TOOLS
    """The Responses request's remote MCP tools (app/tools/mcp/remote.py)."""
    approved: tuple[ToolCall, ...] = ()
    """Held remote calls the client approved: they run before the model is called."""

    @functools.cached_property
    def window(self) -> SessionWindow:
        """The parts of this turn its context window reads (app/agent/context/window.py);
        built once, as every part is frozen (a fallback's route is a new context)."""
        return SessionWindow(
            store=self.store,
            session_id=self.session_id,
            lease=self.lease,
            profile=self.profile,
            compressor=self.compressor,
            stable_tier=self.stable_tier,
            rebuild_prompt=self.rebuild_prompt,
        )

    @property
    def tool_context(self) -> ToolContext:
        p = self.profile
        return ToolContext(
            session_id=self.session_id,
            workspace=self.workspace,
            owner=self.owner,
            end_user=self.end_user,
            bound_session=self.bound_session,
            store=self.store,
            network=p.network,
            terminal_backend=p.terminal_backend,
            terminal_timeout_s=p.terminal_timeout_s,
            fetch_allow_hosts=p.fetch_allow_hosts,
            quota=p.tool_quota(),
        )


@dataclass
class TurnState:
    iterations: int = 0
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: Cost = field(default_factory=Cost.zero)
    emitted_text: bool = False
    in_flight: ReplyBuilder = field(default_factory=ReplyBuilder)
    runner: BatchRunner | None = None
    overflow_retries: int = 0
    tools_ran: int = 0
    routes: tuple[str, ...] = ()
    """Profiles this turn went through, in order, once it fell back; else empty."""

    def tools(self, ctx: TurnContext) -> BatchRunner:
        """The turn's tool runner; one per turn so the spill budget spans its batches."""
        if self.runner is None:
            self.runner = BatchRunner(
                store=ctx.store,
                registry=ctx.tools,
                tool_ctx=ctx.tool_context,
                lease=ctx.lease,
                turn_id=ctx.turn_id,
                context_window=ctx.profile.context_window,
                emit=ctx.emit,
                remote=ctx.remote.named,
                approved=frozenset(c.id for c in ctx.approved) if ctx.approved else frozenset(),
                guard=turn_guard(
                    ctx.gate,
                    profile=ctx.profile,
                    session_id=ctx.session_id,
                    turn_id=ctx.turn_id,
                    owner=ctx.owner,
                    workspace=ctx.workspace,
                    emit=ctx.emit,
                ),
                watch=ContextWatch(
                    store=ctx.store,
                    workspace=ctx.workspace,
                    session_id=ctx.session_id,
                    turn_id=ctx.turn_id,
                    requested_by=ctx.gate.name_of(ctx.owner) if ctx.gate else ctx.owner,
                ),
            )
        return self.runner

    def finished(
        self,
        reason: ExitReason,
        finish: str | None = "stop",
        error: TurnError | None = None,
    ) -> TurnFinished:
        finish_reason = finish if finish in ("length", "content_filter", "tool_calls") else "stop"
        return TurnFinished(
            exit_reason=reason,
            finish_reason=finish_reason,  # type: ignore[arg-type]
            usage=self.usage,
            cost=self.cost,
            upstream_calls=self.calls,
            iterations=self.iterations,
            error=error,
            tools_ran=self.tools_ran,
            routes=self.routes,
        )
