"""run_turn(): the agent loop. Side concerns are functions it calls, not code inside it.

Each pass counts the iteration and takes one step, and the step says what comes next as
one of three values defined here (openai-agents' habit): `FinalOutput` (the model
answered, or handed its calls to the client), `RunAgain` (tool results or a steering
message to read, another route, a compacted log) or `Stop` (the turn ends without an
answer, and why). An exception out of a step ends the turn too, named by `stopped_by`.

A step asks the model (`app/agent/model_call.py`), gives its reply a second look
(`app/agent/reply_checks.py`), stores it before anything acts on it
(`app/agent/reply_store.py`), then runs the tool batch (`app/agent/tool_step.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Literal, assert_never

from app.agent.accumulate import Reply
from app.agent.context.compressor import OVERFLOW_RETRIES
from app.agent.context.window import preflight
from app.agent.cost.budget import HardCapReached
from app.agent.events import (
    ClientToolCalls,
    ExitReason,
    RemoteMcpApproval,
    TurnError,
    TurnFinished,
    TurnText,
)
from app.agent.fallback import fall_back
from app.agent.model_call import call_model, summariser
from app.agent.reply_checks import close_cut_calls, cut_calls, empty_reply_error, second_look
from app.agent.reply_store import keep_partial_reply, persist_intent
from app.agent.steer import deliver_steers
from app.agent.structured import REPAIR_NOTE, output_problem
from app.agent.tool_step import hold_calls, limit_parallel, repair_calls, split_calls
from app.agent.turn_context import TurnContext, TurnState
from app.agent.turn_errors import secret_error, turn_error, upstream_turn_error
from app.db.store import LeaseLost, PersistenceError
from app.providers.base import (
    AssistantMessage,
    Message,
    OutputFormat,
    ProviderError,
    ToolCall,
    UserMessage,
)
from app.security.outbound import SecretInRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FinalOutput:
    """The model answered, or handed its calls to the client: the turn ends with it."""

    reason: Literal["completed", "truncated", "budget_exhausted"]
    finish: str | None


@dataclass(frozen=True, slots=True)
class RunAgain:
    """Call the model again: it has tool results or a steering message to read, or the same
    request goes again on `route` (a fallback) or after a compaction."""

    route: TurnContext | None = None
    """The turn's context on the next profile of its fallback chain, when it moved."""


@dataclass(frozen=True, slots=True)
class Stop:
    """The turn ends without an answer: why, and the error the client sees."""

    reason: ExitReason
    error: TurnError | None = None


NextStep = FinalOutput | RunAgain | Stop


async def run_turn(ctx: TurnContext) -> TurnFinished:
    """Run one turn to its end and return how it ended; never raises for expected failures."""
    state = TurnState()
    try:
        if ctx.approved:
            # The client approved these held calls: their results come before the model
            # reads the conversation again, right after the message that made them.
            state.tools_ran += len(ctx.approved)
            await state.tools(ctx).run(ctx.approved)
        while True:
            final = state.iterations >= ctx.profile.max_iterations  # the last call: no tools
            state.iterations += 1
            step = await take_step(ctx, state, final=final)
            match step:
                case RunAgain():
                    ctx = step.route or ctx
                case FinalOutput():
                    return state.finished(step.reason, step.finish)
                case Stop():
                    return state.finished(step.reason, error=step.error)
                case _:
                    assert_never(step)
    except asyncio.CancelledError:
        keep_partial_reply(ctx, state)
        return state.finished("cancelled")
    except Exception as exc:
        stop = stopped_by(exc, ctx, state)
        return state.finished(stop.reason, error=stop.error)


async def take_step(ctx: TurnContext, state: TurnState, *, final: bool) -> NextStep:
    """One iteration: ask the model, look at its reply, store it, then act on it."""
    if (refusal := ctx.spend.check()) is not None:
        return Stop("spend_limit", refusal)
    try:
        reply = await call_model(ctx, state, final=final)
    except ProviderError as exc:
        return await recover(ctx, state, exc)
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
        return Stop("empty_reply", empty_reply_error(side_effects=state.tools_ran > 0))
    reply = looked.reply
    calls = () if final else planned_calls(ctx, state, reply)
    if not calls and ctx.output_format is not None:
        conformed = await conform(ctx, state, reply, ctx.output_format)
        if conformed is None:
            return Stop("invalid_output", turn_error("invalid_output"))
        reply = conformed
        ctx.emit(TurnText(reply.text))
    await persist_intent(ctx, reply, calls)  # persist before act
    if final:
        return FinalOutput("budget_exhausted", reply.finish)
    if not calls:
        if deliver_steers(ctx):
            return RunAgain()  # a message arrived while the model answered: answer it too
        return FinalOutput("truncated" if looked.truncated else "completed", reply.finish)
    return await act(ctx, state, reply, calls)


def planned_calls(ctx: TurnContext, state: TurnState, reply: Reply) -> tuple[ToolCall, ...]:
    """The reply's tool calls as the turn will store and run them: near misses repaired,
    extra client calls dropped when the client asked for one at a time."""
    calls = reply.tool_calls(f"call_{ctx.turn_id}_{state.iterations}")
    calls = repair_calls(
        calls, ctx.tools, truncated=reply.finish == "length", client=ctx.client_tools
    )
    return limit_parallel(calls, ctx.client_tools, allowed=ctx.parallel_tool_calls)


async def act(
    ctx: TurnContext, state: TurnState, reply: Reply, calls: tuple[ToolCall, ...]
) -> NextStep:
    """Run the server's calls; the client's end the turn, as the client runs them."""
    calls = close_cut_calls(
        ctx.store,
        session_id=ctx.session_id,
        lease=ctx.lease,
        turn_id=ctx.turn_id,
        calls=calls,
        cut=cut_calls(reply, calls),
    )
    server_calls, client_calls = split_calls(calls, ctx.client_tools)
    server_calls, held = hold_calls(server_calls, ctx.remote.held)
    if server_calls:
        state.tools_ran += len(server_calls)
        await state.tools(ctx).run(server_calls)
        if not client_calls and not held:
            deliver_steers(ctx)  # after the batch, before the model reads its results
    for call in held:
        # Left open in the log: the client's mcp_approval_response runs or refuses it.
        remote = ctx.remote.named[call.name]
        ctx.emit(RemoteMcpApproval(call.id, remote.label, remote.raw, call.arguments))
    if client_calls:
        # The client runs these; its next request carries the results and
        # continues this conversation where it stands now.
        ctx.emit(ClientToolCalls(client_calls))
    if client_calls or held:
        return FinalOutput("completed", "tool_calls")
    return RunAgain()


async def recover(ctx: TurnContext, state: TurnState, exc: ProviderError) -> RunAgain:
    """The same request again after a failed call, when something changed: the next route
    of the fallback chain, or a compacted log when it did not fit; else `exc` goes on.
    Either way the iteration is refunded, so the retry gets a fair turn."""
    if (routed := fall_back(ctx, state, exc)) is not None:
        state.iterations -= 1
        return RunAgain(routed)
    if not exc.should_compress or state.overflow_retries >= OVERFLOW_RETRIES:
        raise exc
    state.overflow_retries += 1
    state.iterations -= 1
    if not await compacted(ctx, state):
        raise exc  # nothing left to compact: the same request would fail again
    return RunAgain()


async def compacted(ctx: TurnContext, state: TurnState) -> bool:
    """Force a compaction before an overflow's retry; False when there was nothing to
    compact (one message too long on its own), so the turn stops instead of resending."""
    before = ctx.store.leased_row(session_id=ctx.session_id)
    checked = await preflight(ctx.window, summariser(ctx, state), turn_start=False, force=True)
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


def stopped_by(exc: Exception, ctx: TurnContext, state: TurnState) -> Stop:
    """How a turn ends when a step raised: the failures we expect named for the client, the
    rest logged as ours. Called while `exc` is being handled, so the log has its trace."""
    match exc:
        case ProviderError():
            log.warning("turn %s: upstream %s: %s", ctx.turn_id, exc.kind, exc.message)
            # After a server-side tool ran, a blind retry would run it again.
            error = upstream_turn_error(exc, side_effects=state.tools_ran > 0)
            return Stop("upstream_error", error)
        case SecretInRequest():
            # Nothing was sent; the same request would carry the same secret, so no retry.
            log.warning(
                "turn %s: upstream request held back: it carried a server secret", ctx.turn_id
            )
            return Stop("secret_in_request", secret_error())
        case HardCapReached():
            return Stop("spend_limit", exc.error)
        case LeaseLost():
            return Stop("lease_lost", turn_error("session_busy", "conflict"))
        case PersistenceError():
            log.exception("turn %s: persistence failed", ctx.turn_id)
            return Stop("persistence_failed", turn_error("persistence_failed"))
        case _:
            log.exception("turn %s: internal error", ctx.turn_id)
            return Stop("internal_error", turn_error("internal_error"))
