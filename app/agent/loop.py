"""run_turn(): the agent loop. Side concerns are functions it calls, not code inside it."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

from app.agent.accumulate import Reply, ReplyBuilder
from app.agent.context.cache_planner import effective_ttl
from app.agent.context.close_open_calls import close_unanswered_calls
from app.agent.context.compressor import OVERFLOW_RETRIES, Summariser, SummarySkipped
from app.agent.context.live_projection import projections_for
from app.agent.context.row_passes import project_ahead
from app.agent.context.window import Preflight, observe, preflight
from app.agent.cost.ledger import CallSite, Timing
from app.agent.cost.ledger import record_call as record_call_at
from app.agent.events import (
    ClientToolCalls,
    TurnError,
    TurnFinished,
    TurnReasoning,
    TurnText,
)
from app.agent.fallback import fall_back
from app.agent.reply_checks import close_cut_calls, cut_calls, empty_reply_error, second_look
from app.agent.steer import deliver_steers
from app.agent.structured import REPAIR_NOTE, output_problem
from app.agent.tool_step import limit_parallel, repair_calls, split_calls
from app.agent.turn_context import TurnContext, TurnState
from app.db.store import LeaseLost, NewMessage, PersistenceError
from app.providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    OutputFormat,
    ProviderError,
    ToolCall,
    ToolChoice,
    UserMessage,
)
from app.providers.retry import stream_with_retry
from app.providers.usage import Usage
from app.security.outbound import SecretInRequest

log = logging.getLogger(__name__)

CANCELLED_RESULT = "error: this tool call was cancelled before it finished; its effect is unknown"
FINAL_ANSWER_NOTE = (
    "You have used this turn's tool budget. Answer now from what you already know, "
    "without calling tools."
)


async def run_turn(ctx: TurnContext) -> TurnFinished:
    """Run one turn to its end and return how it ended; never raises for expected failures."""
    state = TurnState()
    try:
        while True:
            final = state.iterations >= ctx.profile.max_iterations
            state.iterations += 1
            if (refusal := ctx.spend.check()) is not None:
                return state.finished("spend_limit", error=refusal)
            try:
                reply = await call_model(ctx, state, final=final)
            except ProviderError as exc:
                if (routed := fall_back(ctx, state, exc)) is not None:
                    ctx = routed
                    state.iterations -= 1  # the fallback gets a fair turn
                    continue
                if not exc.should_compress or state.overflow_retries >= OVERFLOW_RETRIES:
                    raise
                # The provider says it does not fit: compact and retry, iteration refunded.
                state.overflow_retries += 1
                state.iterations -= 1
                if not await compacted(ctx, state):
                    raise  # nothing left to compact: the same request would fail again
                continue
            looked = await second_look(
                reply,
                functools.partial(call_model, ctx, state, final=final),
                # A cut at the client's own output limit is the answer it asked for;
                # only the profile's default limit is worth continuing past.
                max_continuations=0
                if ctx.sampling.max_tokens is not None
                else ctx.profile.max_continuations,
            )
            if looked.empty:
                error = empty_reply_error(side_effects=state.tools_ran > 0)
                return state.finished("empty_reply", error=error)
            reply = looked.reply
            calls = () if final else reply.tool_calls(f"call_{ctx.turn_id}_{state.iterations}")
            calls = repair_calls(
                calls, ctx.tools, truncated=reply.finish == "length", client=ctx.client_tools
            )
            calls = limit_parallel(calls, ctx.client_tools, allowed=ctx.parallel_tool_calls)
            if not calls and ctx.output_format is not None:
                conformed = await conform(ctx, state, reply, ctx.output_format)
                if conformed is None:
                    return state.finished("invalid_output", error=_error("invalid_output"))
                reply = conformed
                ctx.emit(TurnText(reply.text))
            await persist_intent(ctx, reply, calls)  # persist before act
            if final:
                return state.finished("budget_exhausted", reply.finish)
            if not calls:
                if deliver_steers(ctx):
                    continue  # a message arrived while the model answered: answer it too
                return state.finished(
                    "truncated" if looked.truncated else "completed", reply.finish
                )
            calls = close_cut_calls(
                ctx.store,
                session_id=ctx.session_id,
                lease=ctx.lease,
                turn_id=ctx.turn_id,
                calls=calls,
                cut=cut_calls(reply, calls),
            )
            server_calls, client_calls = split_calls(calls, ctx.client_tools)
            if server_calls:
                state.tools_ran += len(server_calls)
                await state.tools(ctx).run(server_calls)
                if not client_calls:
                    deliver_steers(ctx)  # after the batch, before the model reads its results
            if client_calls:
                # The client runs these; its next request carries the results and
                # continues this conversation where it stands now.
                ctx.emit(ClientToolCalls(client_calls))
                return state.finished("completed", "tool_calls")
    except ProviderError as exc:
        log.warning("turn %s: upstream %s: %s", ctx.turn_id, exc.kind, exc.message)
        return state.finished("upstream_error", error=upstream_turn_error(exc, state))
    except SecretInRequest:
        # Nothing was sent; the same request would carry the same secret, so no retry.
        log.warning("turn %s: upstream request held back: it carried a server secret", ctx.turn_id)
        return state.finished("secret_in_request", error=secret_error())
    except LeaseLost:
        return state.finished("lease_lost", error=_error("session_busy", "conflict"))
    except PersistenceError:
        log.exception("turn %s: persistence failed", ctx.turn_id)
        return state.finished("persistence_failed", error=_error("persistence_failed"))
    except asyncio.CancelledError:
        keep_partial_reply(ctx, state)
        return state.finished("cancelled")
    except Exception:
        log.exception("turn %s: internal error", ctx.turn_id)
        return state.finished("internal_error", error=_error("internal_error"))


async def compacted(ctx: TurnContext, state: TurnState) -> bool:
    """Force a compaction before an overflow's retry; False when there was nothing to
    compact (one message too long on its own), so the turn stops instead of resending."""
    before = ctx.store.leased_row(session_id=ctx.session_id)
    checked = await preflight(ctx, summariser(ctx, state), turn_start=False, force=True)
    return before is None or checked.session.compactions > before.compactions


async def conform(
    ctx: TurnContext, state: TurnState, reply: Reply, output: OutputFormat
) -> Reply | None:
    """The final answer checked against the client's format, repaired once; None if not.

    The repair exchange rides after the cached prefix and is never persisted: only the
    answer that satisfies the format becomes part of the conversation.
    """
    problem = output_problem(output, reply.text)
    if problem is None:
        return reply
    log.info("turn %s: answer off the requested format (%s); one repair", ctx.turn_id, problem)
    tail: tuple[Message, ...] = (
        AssistantMessage(content=reply.text or None),
        UserMessage(REPAIR_NOTE.format(problem=problem), instruction=True),
    )
    repaired = await call_model(ctx, state, final=True, tail=tail)
    if output_problem(output, repaired.text) is not None:
        return None
    return repaired


async def call_model(
    ctx: TurnContext,
    state: TurnState,
    *,
    final: bool,
    tail: tuple[Message, ...] = (),
    joined: bool = False,
) -> Reply:
    """One upstream call: build the request, stream it, record usage and cost."""
    checked = await preflight(ctx, summariser(ctx, state), turn_start=state.calls == 0)
    await project_ahead(ctx, checked.rows)  # a long log's first fold, off the loop
    request = build_request(
        ctx, checked, final=final, tail=tail, tool_choice=tool_choice_for(ctx, state, final)
    )
    cache_break = checked.session.pending_cache_break
    started = time.monotonic()
    first_byte: float | None = None
    state.in_flight = ReplyBuilder()
    separate = state.emitted_text and not joined  # a continuation goes on mid-sentence
    try:
        async for event in stream_with_retry(
            ctx.provider,
            request,
            max_attempts=ctx.profile.retry_attempts,
            base_delay=ctx.profile.retry_base_delay_s,
        ):
            first_byte = first_byte or time.monotonic()
            state.in_flight.add(event)
            # Structured answers are checked before the client sees them; prose between
            # tool calls would corrupt the JSON the client parses, so none is streamed.
            if event.kind == "text" and event.text and ctx.output_format is None:
                if separate:  # text of a later iteration reads as a new paragraph
                    ctx.emit(TurnText("\n\n"))
                    separate = False
                state.emitted_text = True
                ctx.emit(TurnText(event.text))
            elif event.kind == "reasoning":
                ctx.emit(TurnReasoning(event.text))
    except ProviderError as exc:
        record_call(ctx, state, Usage(), started, first_byte, exc.kind, cache_break)
        raise
    reply = state.in_flight.reply()
    record_call(ctx, state, reply.usage or Usage(), started, first_byte, "ok", cache_break)
    observe(ctx, checked, usage=reply.usage)
    return reply


def summariser(ctx: TurnContext, state: TurnState) -> Summariser:
    """An upstream call for a compaction summary, billed and recorded like any other."""

    async def summarise(request: ModelRequest) -> tuple[str, Usage | None]:
        if ctx.spend.check() is not None:
            raise SummarySkipped("a spend cap is reached; no model summary")
        started, first_byte, building = time.monotonic(), None, ReplyBuilder()
        try:
            async for event in stream_with_retry(ctx.provider, request, max_attempts=2):
                first_byte = first_byte or time.monotonic()
                building.add(event)
        except ProviderError as exc:
            record_call(ctx, state, Usage(), started, first_byte, exc.kind, None, request.model)
            raise
        usage = building.usage or Usage()
        record_call(ctx, state, usage, started, first_byte, "ok", None, request.model)
        return building.reply().text, building.usage

    return summarise


def tool_choice_for(ctx: TurnContext, state: TurnState, final: bool) -> ToolChoice:
    """The client's `tool_choice` for this upstream call of the turn.

    A forced server tool is forced once: after it ran, the model must be free to answer.
    `required` and a named client tool hold until the model calls one, which ends the turn.
    """
    choice = ctx.tool_choice
    if final or choice == "none":
        return "none"
    if choice == "auto" or choice in ctx.client_tools:
        return choice
    if choice == "required" and ctx.client_tools:
        return choice
    return choice if state.iterations <= 1 else "auto"


def build_request(
    ctx: TurnContext,
    checked: Preflight,
    *,
    final: bool,
    tail: tuple[Message, ...] = (),
    tool_choice: ToolChoice = "auto",
) -> ModelRequest:
    projections = projections_for(ctx.store)
    projected = projections.project(ctx.session_id, checked.rows)
    messages = projected.messages
    if final and not tail:
        # Appended after the cached prefix, so the last call costs no cache break.
        messages = (*messages, UserMessage(FINAL_ANSWER_NOTE))
    messages = (*messages, *tail)
    plan = projections.plan(
        projected,
        messages,
        strategy=ctx.profile.cache_strategy,
        system_prompt=checked.prompt,
        stable_len=checked.stable_len,
        prefixes=ctx.prefixes,
    )
    return ModelRequest(
        model=ctx.profile.model,
        system=plan.system,
        messages=plan.messages,
        tools=ctx.tool_specs,
        sampling=ctx.sampling,
        cache_ttl=effective_ttl(ctx.profile.cache_ttl, ctx.profile.cache_ttl_supported),
        prompt_cache_key=ctx.session_id,
        tool_choice=tool_choice,
        parallel_tool_calls=ctx.parallel_tool_calls if ctx.client_tools else None,
        output_format=ctx.output_format,
    )


def record_call(
    ctx: TurnContext,
    state: TurnState,
    usage: Usage,
    started: float,
    first_byte: float | None,
    outcome: str,
    cache_break: str | None,
    model: str | None = None,
) -> None:
    site = CallSite(
        store=ctx.store,
        metrics=ctx.metrics,
        spend=ctx.spend,
        session_id=ctx.session_id,
        owner=ctx.owner,
        turn_id=ctx.turn_id,
        profile=ctx.profile.name,
        provider=ctx.profile.provider,
        price_override=ctx.price_override,
        end_user=ctx.end_user,
    )
    cost = record_call_at(
        site,
        model=model or ctx.profile.model,
        usage=usage,
        timing=Timing(started, first_byte),
        outcome=outcome,
        cache_break=cache_break,
    )
    state.calls += 1
    state.usage = state.usage + usage
    state.cost = state.cost + cost


async def persist_intent(ctx: TurnContext, reply: Reply, calls: tuple[ToolCall, ...]) -> None:
    """Store the reply before anything acts on it. With tool calls that is a commit, made on
    the store's writer thread (with the call's deferred usage row) so a stalled disk holds
    this turn only; a plain answer rides in the turn's closing commit."""
    if not calls:
        persist_reply(ctx, reply, calls)
        return
    landing = ctx.store.commit_off_loop(functools.partial(persist_reply, ctx, reply, calls))
    try:
        await asyncio.shield(landing)
    except asyncio.CancelledError:
        # The commit goes on in the writer thread; let it land before the cancellation
        # closes the calls it records, or they would stay open until the next request.
        await asyncio.wait({landing})
        raise


def persist_reply(ctx: TurnContext, reply: Reply, calls: tuple[ToolCall, ...]) -> None:
    if not reply.text and not calls:
        return
    if calls:
        # The tools about to run (a plugin's too) may take the workspace as there. A private
        # one is made here, in the unit that records their intent, on the writer thread: at
        # each session's opening it cost every session without tools, and on the event loop
        # every stream would wait out the file system's journal.
        ctx.workspace.mkdir(parents=True, exist_ok=True)
    ctx.store.append_messages(
        session_id=ctx.session_id,
        lease=ctx.lease,
        turn_id=ctx.turn_id,
        # A reply without calls is acted on by nothing: it rides in the closing commit.
        defer=not calls,
        messages=[
            NewMessage(
                role="assistant",
                content=reply.text or None,
                tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
                reasoning=reply.reasoning or None,
            )
        ],
    )


def keep_partial_reply(ctx: TurnContext, state: TurnState) -> None:
    """On cancel: keep the text produced so far as plain text and close open tool calls."""
    try:
        partial = state.in_flight.reply()
        if partial.text and partial.finish is None:
            persist_reply(ctx, partial, ())
        close_unanswered_calls(
            ctx.store,
            session_id=ctx.session_id,
            lease=ctx.lease,
            turn_id=ctx.turn_id,
            result=CANCELLED_RESULT,
        )
    except (LeaseLost, PersistenceError):
        log.exception("turn %s: could not record the cancellation", ctx.turn_id)


def _error(code: str, type_: str = "server_error") -> TurnError:
    messages = {
        "session_busy": "another turn took over this session",
        "persistence_failed": "the turn could not be saved; nothing further was run",
        "internal_error": "internal error",
        "invalid_output": "the model's answer did not match the requested response_format, "
        "also after one repair attempt",
    }
    return TurnError(message=messages.get(code, code), type=type_, code=code)


def secret_error() -> TurnError:
    return TurnError(
        message="the request to the model carried one of the server's own credentials, so it "
        "was not sent; nothing in this conversation may repeat a server key",
        type="invalid_request_error",
        code="secret_in_request",
    )


def upstream_turn_error(exc: ProviderError, state: TurnState | None = None) -> TurnError:
    # After a server-side tool ran, a blind retry would run it again.
    side_effects = state is not None and state.tools_ran > 0
    return TurnError(
        message=f"upstream model call failed ({exc.kind})",
        type="upstream_error",
        code=f"upstream_{exc.kind}",
        retryable=exc.retryable and not side_effects,
        retry_after=exc.retry_after,
    )
