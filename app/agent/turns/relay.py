"""A plain relay turn: the client's conversation to the upstream and back, nothing more.

Apps send side requests on the same endpoint (Open WebUI's titles, tags and follow-up
suggestions): running each as a full agent turn with server tools and a stored session
is slow, costly and clutters the session list. A relay profile forwards the request as
it is, streams the answer, returns the client's own tool calls, and bills the call in
the usage ledger like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from app.agent.accumulate import ReplyBuilder
from app.agent.context.projection import project
from app.agent.cost.budget import SpendGuard
from app.agent.cost.ledger import CallSite, Timing, record_call
from app.agent.cost.spend_caps import SpendCaps, price_override
from app.agent.events import ClientToolCalls, TurnError, TurnFinished, TurnText
from app.agent.refusals import SpendRefused
from app.agent.structured import output_problem
from app.agent.turn_errors import secret_error, upstream_turn_error
from app.agent.turn_request import TurnRequest, check_tool_choice, refuse_prefill
from app.agent.turns.handle import TurnHandle
from app.config import Profile
from app.db.chat_store import StoredImage
from app.db.store import NewMessage, Store, StoredMessage
from app.observe.metrics import Metrics
from app.providers.base import (
    ModelRequest,
    OutputFormat,
    Provider,
    ProviderError,
    SamplingParams,
    SystemBlock,
    ToolChoice,
    ToolSpec,
)
from app.providers.pricing import Cost, PriceOverride
from app.providers.retry import stream_with_retry
from app.providers.usage import Usage
from app.security.outbound import SecretInRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RelayInput:
    store: Store
    provider: Provider
    profile: Profile
    ledger_session: str
    owner: str
    end_user: str
    """The app's end user ("" for none): the ledger keeps it, its cap counts it."""
    instructions: tuple[str, ...]
    rows: tuple[NewMessage, ...]
    images: Mapping[str, StoredImage]
    tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    parallel_tool_calls: bool | None
    output_format: OutputFormat | None
    sampling: SamplingParams
    spend: SpendGuard
    price_override: PriceOverride | None
    metrics: Metrics


def _stored(rows: tuple[NewMessage, ...]) -> list[StoredMessage]:
    return [
        StoredMessage(
            id=i,
            role=r.role,
            content=r.content,
            api_content=None,
            tool_calls=tuple(r.tool_calls or ()),
            tool_call_id=r.tool_call_id,
            tool_name=r.tool_name,
            is_error=r.is_error,
            turn_id=None,
            images=r.images,
        )
        for i, r in enumerate(rows, start=1)
    ]


def relay_request(relay: RelayInput) -> ModelRequest:
    system = "\n\n".join(text for text in relay.instructions if text)
    return ModelRequest(
        model=relay.profile.model,
        system=(SystemBlock(system),) if system else (),
        messages=project(_stored(relay.rows), relay.images),
        tools=relay.tools,
        sampling=relay.sampling,
        tool_choice=relay.tool_choice,
        parallel_tool_calls=relay.parallel_tool_calls if relay.tools else None,
        output_format=relay.output_format,
    )


async def run_relay(relay: RelayInput, handle: TurnHandle) -> TurnFinished:
    site = CallSite(
        store=relay.store,
        metrics=relay.metrics,
        spend=relay.spend,
        session_id=relay.ledger_session,
        owner=relay.owner,
        turn_id=handle.turn_id,
        profile=relay.profile.name,
        provider=relay.profile.provider,
        price_override=relay.price_override,
        end_user=relay.end_user,
    )
    timing = Timing(time.monotonic(), None)
    building = ReplyBuilder()

    def done(cost: Cost, usage: Usage, **kwargs: object) -> TurnFinished:
        return TurnFinished(usage=usage, cost=cost, upstream_calls=1, iterations=1, **kwargs)  # type: ignore[arg-type]

    try:
        async for event in stream_with_retry(
            relay.provider,
            relay_request(relay),
            max_attempts=relay.profile.retry_attempts,
            base_delay=relay.profile.retry_base_delay_s,
        ):
            if timing.first_byte is None:
                timing = Timing(timing.started, time.monotonic())
            building.add(event)
            if event.kind == "text" and event.text and relay.output_format is None:
                handle.publish(TurnText(event.text))
    except ProviderError as exc:
        cost = record_call(
            site, model=relay.profile.model, usage=Usage(), timing=timing, outcome=exc.kind
        )
        return done(
            cost,
            Usage(),
            exit_reason="upstream_error",
            finish_reason="stop",
            error=upstream_turn_error(exc),
        )
    except SecretInRequest:
        log.warning("relay %s: upstream request held back: a server secret", handle.turn_id)
        return TurnFinished(
            exit_reason="secret_in_request",
            finish_reason="stop",
            usage=Usage(),
            cost=Cost.zero(),
            upstream_calls=0,
            error=secret_error(),
        )
    except asyncio.CancelledError:
        usage = building.usage or Usage()
        cost = record_call(
            site, model=relay.profile.model, usage=usage, timing=timing, outcome="cancelled"
        )
        return done(cost, usage, exit_reason="cancelled", finish_reason="stop")
    reply = building.reply()
    usage = reply.usage or Usage()
    cost = record_call(site, model=relay.profile.model, usage=usage, timing=timing, outcome="ok")
    calls = reply.tool_calls(f"call_{handle.turn_id}")
    if calls:
        handle.publish(ClientToolCalls(calls))
        return done(cost, usage, exit_reason="completed", finish_reason="tool_calls")
    if relay.output_format is not None:
        if (problem := output_problem(relay.output_format, reply.text)) is not None:
            log.info("relay %s: answer off the requested format (%s)", handle.turn_id, problem)
            error = TurnError(
                message="the model's answer did not match the requested response_format",
                type="server_error",
                code="invalid_output",
            )
            return done(
                cost, usage, exit_reason="invalid_output", finish_reason="stop", error=error
            )
        handle.publish(TurnText(reply.text))
    finish = reply.finish if reply.finish in ("length", "content_filter") else "stop"
    return done(cost, usage, exit_reason="completed", finish_reason=finish)


def relay_input(
    req: TurnRequest, *, store: Store, provider: Provider, spend: SpendCaps, metrics: Metrics
) -> RelayInput:
    """A relay turn's whole input: no tools of ours, nothing kept but the usage ledger."""
    refuse_prefill(req, provider)
    profile = req.profile
    end_user = req.end_user or ""
    guard = spend.guard(
        profile, owner=req.owner, end_user=end_user, session=None, request_cap=req.max_cost_usd
    )
    if (refusal := guard.check()) is not None:
        raise SpendRefused(refusal)
    specs = req.client_tools
    check_tool_choice(req.tool_choice, specs)
    return RelayInput(
        store=store,
        provider=provider,
        profile=profile,
        ledger_session=ledger_session(store, owner=req.owner, profile=profile.name),
        owner=req.owner,
        end_user=end_user,
        instructions=req.instructions,
        rows=tuple(req.rows()),
        images={i.sha256: i for i in req.images()},
        tools=specs,
        tool_choice=req.tool_choice,
        parallel_tool_calls=req.parallel_tool_calls,
        output_format=req.output_format,
        sampling=req.sampling,
        spend=guard,
        price_override=price_override(profile),
        metrics=metrics,
    )


def ledger_session(store: Store, *, owner: str, profile: str) -> str:
    """The bookkeeping session that holds one principal's relay calls for one profile."""
    ledger_id = f"relay_{owner[:16]}_{profile}"[:128]
    if store.get_session(session_id=ledger_id) is None:
        try:
            store.create_session(
                session_id=ledger_id, owner=owner, profile=profile, system_prompt=""
            )
        except Exception:
            # A concurrent first relay request created it: that is all we needed.
            if store.get_session(session_id=ledger_id) is None:
                raise
    return ledger_id
