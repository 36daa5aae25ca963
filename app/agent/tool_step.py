"""One batch of tool calls: repair them, run them through the scheduler, persist each
result as it arrives, and relocate oversized output behind a preview."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from app.agent.context.context_files import ContextWatch
from app.agent.events import (
    RemoteMcpCall,
    RemoteMcpResult,
    ToolFinished,
    ToolStarted,
    TurnEvent,
)
from app.db.chat_store import StoredImage, put_images
from app.db.mcp_store import McpCall, record_call
from app.db.store import NewMessage, Store
from app.providers.base import Image, ToolCall
from app.tools.call_repair import repair_json_arguments, resolve_tool_name
from app.tools.dispatch import Guard, dispatch
from app.tools.mcp.names import is_mcp_name, server_of, tool_of
from app.tools.mcp.outcome import NOT_RUN, McpOutcome
from app.tools.mcp.remote import (
    RemoteOutcome,
    RemoteTool,
    approval_id,
    error_json,
    execution_error,
)
from app.tools.registry import Tool, ToolContext, ToolOutcome, ToolRegistry
from app.tools.spill import SpillInput, budgets, spill

T = TypeVar("T")


def repair_calls(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    *,
    truncated: bool,
    client: frozenset[str] = frozenset(),
) -> tuple[ToolCall, ...]:
    """Repair near-miss names and safely fixable JSON before the calls are persisted, so
    the stored transcript replays valid on every wire. Unfixable calls stay as they are
    and the scheduler answers them with an error result the model reads."""
    known = sorted({*registry.names(), *client})
    repaired: list[ToolCall] = []
    for call in calls:
        name = call.name if call.name in client else None
        name = name or resolve_tool_name(call.name, known).name or call.name
        args = repair_json_arguments(call.arguments, truncated=truncated)
        arguments = call.arguments
        if isinstance(args, dict):
            canonical = json.dumps(args, ensure_ascii=False)
            # Keep the model's own bytes when they already parse: rewriting valid JSON
            # would change what the cache has seen for no gain.
            arguments = call.arguments if _parses(call.arguments) else canonical
        repaired.append(ToolCall(id=call.id, name=name, arguments=arguments))
    return tuple(repaired)


def split_calls(
    calls: Sequence[ToolCall], client: frozenset[str]
) -> tuple[tuple[ToolCall, ...], tuple[ToolCall, ...]]:
    """(server calls, client calls): a client-declared name shadows a server tool."""
    server = tuple(c for c in calls if c.name not in client)
    return server, tuple(c for c in calls if c.name in client)


def hold_calls(
    calls: tuple[ToolCall, ...], held: frozenset[str]
) -> tuple[tuple[ToolCall, ...], tuple[ToolCall, ...]]:
    """(calls to run, remote calls that wait for the client's approval)."""
    if not held:
        return calls, ()
    return tuple(c for c in calls if c.name not in held), tuple(c for c in calls if c.name in held)


def limit_parallel(
    calls: tuple[ToolCall, ...], client: frozenset[str], *, allowed: bool | None
) -> tuple[ToolCall, ...]:
    """With `parallel_tool_calls: false` the client gets at most one call to run; extra
    client calls are dropped before they are persisted, so none is left unanswered."""
    if allowed is not False:
        return calls
    first_client = next((c for c in calls if c.name in client), None)
    return tuple(c for c in calls if c.name not in client or c is first_client)


def _remote_result(call: ToolCall, outcome: ToolOutcome) -> RemoteMcpResult:
    if isinstance(outcome, RemoteOutcome):
        return RemoteMcpResult(call.id, outcome.output, error_json(outcome.error))
    # Answered before the server was reached (bad arguments, a refusal): Courier's words.
    return RemoteMcpResult(call.id, None, error_json(execution_error(outcome.content)))


def _stored(images: Sequence[Image]) -> list[StoredImage]:
    """A tool's images keyed like a user's (sha256 of the bytes): the same picture is one
    row per session whoever brought it."""
    return [
        StoredImage(hashlib.sha256(base64.b64decode(i.data)).hexdigest(), i.media_type, i.data, "")
        for i in images
    ]


def _parses(raw: str) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


@dataclass
class BatchRunner:
    store: Store
    registry: ToolRegistry
    tool_ctx: ToolContext
    lease: str
    turn_id: str
    context_window: int
    emit: Callable[[TurnEvent], None]
    guard: Guard | None = None
    """Approvals and the command guard (app/agent/approvals.py), before each call."""
    watch: ContextWatch | None = None
    """The workspace's context files, read around each batch: a change a tool made is held
    for a person's approval (app/agent/context/context_files.py)."""
    remote: Mapping[str, RemoteTool] = field(default_factory=dict)
    """The request's remote MCP tools by model name: their calls are rendered as
    `mcp_call` items (RemoteMcpCall / RemoteMcpResult)."""
    approved: frozenset[str] = frozenset()
    """Call ids the client approved (an `mcp_call`'s approval_request_id)."""
    spill_used: int = 0
    """Characters of tool output already put in front of the model this turn."""
    _started: dict[int, float] = field(default_factory=dict)
    _rows: dict[int, int] = field(default_factory=dict)
    """This batch's stored results: call index -> message row id."""

    async def run(self, calls: Sequence[ToolCall]) -> list[ToolOutcome]:
        # Per batch: indices restart at 0, and a row kept from the last batch would pass
        # for this one's stored result.
        self._rows = {}
        before = self.watch.before() if self.watch is not None else None
        try:
            outcomes = await dispatch(
                calls,
                self.registry,
                self.tool_ctx,
                on_start=self._on_start,
                on_result=self._on_result,
                guard=self.guard,
                in_unit=self._in_unit,
            )
        finally:
            if self.watch is not None and before is not None:
                await self.watch.after(before)
        self._relocate_oversized(calls, outcomes)
        return outcomes

    def _on_start(self, index: int, call: ToolCall) -> None:
        self._started[index] = time.monotonic()
        self.emit(ToolStarted(call.id, call.name, source=self._source(call)))
        if (remote := self.remote.get(call.name)) is not None:
            asked = approval_id(call.id) if call.id in self.approved else None
            self.emit(RemoteMcpCall(call.id, remote.label, remote.raw, call.arguments, asked))

    async def _on_result(self, index: int, call: ToolCall, outcome: ToolOutcome) -> None:
        # Committed as it arrives, on the store's writer thread: a crash later in the batch
        # keeps what already ran, and a slow disk holds this turn, not every stream.
        started = self._started.get(index, time.monotonic())
        if index not in self._rows:  # else its `in_unit` work stored it with its change
            ran_ms = (time.monotonic() - started) * 1000
            store = partial(self._store_result, call, outcome, ran_ms=ran_ms)
            self._rows[index] = await self._commit(store)
        duration_ms = (time.monotonic() - started) * 1000
        source = self._source(call)
        self.emit(ToolFinished(call.id, call.name, outcome.is_error, duration_ms, source=source))
        if call.name in self.remote:
            self.emit(_remote_result(call, outcome))

    def _source(self, call: ToolCall) -> str:
        if not is_mcp_name(call.name):
            return ""
        remote = self.remote.get(call.name)
        return f"mcp-remote:{remote.label}" if remote else f"mcp:{server_of(call.name)}"

    async def _in_unit(
        self, index: int, call: ToolCall, tool: Tool, args: dict[str, Any]
    ) -> ToolOutcome:
        """A store tool's change and its result in one commit: apart, they were two, and
        a crash between them left the change made and the call unanswered."""

        def unit() -> tuple[ToolOutcome, int]:
            outcome = self.registry.invoke_in_unit(tool, args, self.tool_ctx)
            return outcome, self._store_result(call, outcome)

        outcome, self._rows[index] = await self._commit(unit)
        return outcome

    async def _commit(self, work: Callable[[], T]) -> T:
        landing = self.store.commit_off_loop(work)
        try:
            return await asyncio.shield(landing)
        except asyncio.CancelledError:
            # The commit goes on in the writer thread; let it land before the cancellation
            # closes the batch's unanswered calls, or this call would get an `interrupted`
            # result as well as its own.
            await asyncio.wait({landing})
            raise

    def _store_result(self, call: ToolCall, outcome: ToolOutcome, *, ran_ms: float = 0.0) -> int:
        images = _stored(outcome.images)
        # The images land before the row naming them: a row read back always finds them.
        put_images(self.store, session_id=self.tool_ctx.session_id, images=images)
        result = NewMessage(
            role="tool",
            content=outcome.content,
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=outcome.is_error,
            images=tuple(i.sha256 for i in images),
        )
        [row_id] = self.store.append_messages(
            session_id=self.tool_ctx.session_id,
            lease=self.lease,
            turn_id=self.turn_id,
            messages=[result],
        )
        if is_mcp_name(call.name):
            record_call(self.store, self._mcp_call(call, outcome, ran_ms))
        return row_id

    def _mcp_call(self, call: ToolCall, outcome: ToolOutcome, ran_ms: float) -> McpCall:
        """The ledger's row for an MCP call; one that never reached its server (refused,
        unparsable) is named from the model's name for the tool."""
        remote = self.remote.get(call.name)
        if isinstance(outcome, McpOutcome):
            server, tool, kind = outcome.server, outcome.tool, outcome.kind
        elif remote is not None:
            server, tool, kind = remote.label, remote.raw, NOT_RUN
        else:
            server, tool, kind = server_of(call.name), tool_of(call.name), NOT_RUN
        ctx = self.tool_ctx
        return McpCall(
            session_id=ctx.session_id,
            turn_id=self.turn_id,
            call_id=call.id,
            owner=ctx.owner,
            end_user=ctx.end_user,
            server=server,
            tool=tool,
            remote=remote is not None,
            started_at=time.time() - ran_ms / 1000,
            duration_ms=round(ran_ms, 3),
            outcome=kind,
            result_chars=len(outcome.content),
        )

    def _relocate_oversized(self, calls: Sequence[ToolCall], outcomes: list[ToolOutcome]) -> None:
        """Rows keep the full text for display; the model sees a preview of big results.

        This runs after the batch and before the next request, so the rows it changes have
        never been sent upstream: no cached prefix is rewritten.
        """
        per_result, per_turn = budgets(self.context_window)
        inputs = [
            SpillInput(
                call_id=call.id,
                tool_name=call.name,
                content=outcome.content,
                exempt=bool((tool := self.registry.get(call.name)) and tool.spill_exempt),
            )
            for call, outcome in zip(calls, outcomes, strict=True)
        ]
        outputs = spill(
            inputs,
            workspace=self.tool_ctx.workspace,
            turn_id=self.turn_id,
            per_result=per_result,
            per_turn=per_turn,
            already_used=self.spill_used,
        )
        for index, out in enumerate(outputs):
            self.spill_used += len(out.model_content)
            if out.spilled_path is not None and index in self._rows:
                self.store.set_api_content(
                    session_id=self.tool_ctx.session_id,
                    lease=self.lease,
                    message_id=self._rows[index],
                    api_content=out.model_content,
                )
