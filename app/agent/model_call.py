"""One upstream call of a turn, in pydantic-ai's three steps: prepare, request, count.

Prepare: the context window's preflight (prune, compact), the projection of the live log
and its cache marks, into one `ModelRequest`. Request: stream it with retries, passing
text and reasoning on to the client as they arrive. Count: price the usage, record it in
the ledger and the turn's running sums, and calibrate the window's estimate against it.
A compaction's summary is an upstream call too, billed and recorded the same way.
"""

from __future__ import annotations

import dataclasses
import time
from decimal import Decimal

from app.agent.accumulate import Reply, ReplyBuilder
from app.agent.context.cache_planner import effective_ttl
from app.agent.context.compressor import Summariser, SummarySkipped
from app.agent.context.live_projection import projections_for
from app.agent.context.row_passes import project_ahead
from app.agent.context.window import Preflight, observe, preflight
from app.agent.cost.budget import Admission, HardCapReached
from app.agent.cost.call_bound import (
    MIN_OUTPUT_TOKENS,
    CallBound,
    affordable_output,
    call_cost,
    prompt_bound,
)
from app.agent.cost.ledger import CallSite, Timing
from app.agent.cost.ledger import record_call as record_call_at
from app.agent.events import TurnError, TurnReasoning, TurnText
from app.agent.turn_context import TurnContext, TurnState
from app.providers.base import (
    Message,
    ModelRequest,
    ProviderError,
    ToolChoice,
    UserMessage,
)
from app.providers.pricing import Cost
from app.providers.retry import stream_with_retry
from app.providers.usage import Usage

FINAL_ANSWER_NOTE = (
    "You have used this turn's tool budget. Answer now from what you already know, "
    "without calling tools."
)


async def call_model(
    ctx: TurnContext,
    state: TurnState,
    *,
    final: bool,
    tail: tuple[Message, ...] = (),
    joined: bool = False,
) -> Reply:
    """One upstream call: build the request, stream it, record usage and cost."""
    window = ctx.window
    # Prepare: the window's preflight, the projection, the request with its cache marks.
    checked = await preflight(window, summariser(ctx, state), turn_start=state.calls == 0)
    await project_ahead(ctx.store, ctx.session_id, checked.rows)  # a long log's first fold
    request = build_request(
        ctx, checked, final=final, tail=tail, tool_choice=tool_choice_for(ctx, state, final)
    )
    cache_break = checked.session.pending_cache_break
    request, admission = admitted(ctx, request)
    # Request: stream it, passing text and reasoning on as they arrive.
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
    except BaseException as exc:
        if admission is not None:
            ctx.spend.settle(admission, billed=None, lost=first_byte is not None)
        if isinstance(exc, ProviderError):
            timing = Timing(started, first_byte)
            record_call(
                ctx, state, usage=Usage(), timing=timing, outcome=exc.kind, cache_break=cache_break
            )
        raise
    # Count: price and record the call, and calibrate the window's estimate against it.
    reply = state.in_flight.reply()
    timing = Timing(started, first_byte)
    usage = reply.usage or Usage()
    cost = record_call(
        ctx, state, usage=usage, timing=timing, outcome="ok", cache_break=cache_break
    )
    if admission is not None:
        ctx.spend.settle(admission, billed=cost, lost=reply.usage is None)
    observe(window, checked, usage=reply.usage)
    return reply


def summariser(ctx: TurnContext, state: TurnState) -> Summariser:
    """An upstream call for a compaction summary, billed and recorded like any other."""

    async def summarise(request: ModelRequest) -> tuple[str, Usage | None]:
        if ctx.spend.check() is not None:
            raise SummarySkipped("a spend cap is reached; no model summary")
        try:
            request, admission = admitted(ctx, request)
        except HardCapReached as exc:
            raise SummarySkipped(exc.error.message) from None
        started, first_byte, building = time.monotonic(), None, ReplyBuilder()
        try:
            async for event in stream_with_retry(ctx.provider, request, max_attempts=2):
                first_byte = first_byte or time.monotonic()
                building.add(event)
        except BaseException as exc:
            if admission is not None:
                ctx.spend.settle(admission, billed=None, lost=first_byte is not None)
            if isinstance(exc, ProviderError):
                timing = Timing(started, first_byte)
                record_call(
                    ctx, state, usage=Usage(), timing=timing, outcome=exc.kind, model=request.model
                )
            raise
        usage = building.usage or Usage()
        timing = Timing(started, first_byte)
        cost = record_call(
            ctx, state, usage=usage, timing=timing, outcome="ok", model=request.model
        )
        if admission is not None:
            ctx.spend.settle(admission, billed=cost, lost=building.usage is None)
        return building.reply().text, building.usage

    return summarise


def admitted(ctx: TurnContext, request: ModelRequest) -> tuple[ModelRequest, Admission | None]:
    """`request` admitted under the turn's hard spend cap, its `max_tokens` clamped to what
    the cap affords; raises `HardCapReached` when even a short answer could pass it. Under
    no hard cap, `request` as it is."""
    if not ctx.spend.hard:
        return request, None
    prompt = prompt_bound(request)
    most = request.sampling.max_tokens or ctx.profile.max_output_tokens

    def price(output_tokens: int) -> Decimal | None:
        return call_cost(
            CallBound(prompt, output_tokens),
            model=request.model,
            provider=ctx.profile.provider,
            override=ctx.price_override,
        )

    admission = ctx.spend.admit(
        price,
        lambda headroom: affordable_output(price, headroom, most=most),
        max_tokens=most,
        min_tokens=MIN_OUTPUT_TOKENS,
    )
    if isinstance(admission, TurnError):
        raise HardCapReached(admission)
    if admission is None:
        return request, None
    sampling = dataclasses.replace(request.sampling, max_tokens=admission.max_tokens)
    return dataclasses.replace(request, sampling=sampling), admission


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
    *,
    usage: Usage,
    timing: Timing,
    outcome: str,
    cache_break: str | None = None,
    model: str | None = None,
) -> Cost:
    """Price and record one upstream call of the turn, add it to the turn's sums and
    return its cost.
    `cache_break`: the deliberate one the call makes, if any; `model`: when not the
    profile's (a summary's)."""
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
        timing=timing,
        outcome=outcome,
        cache_break=cache_break,
    )
    state.calls += 1
    state.usage = state.usage + usage
    state.cost = state.cost + cost
    return cost
