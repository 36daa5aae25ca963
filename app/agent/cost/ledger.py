"""Price one upstream call and record it: the metrics, the ledger row, the spend guard.

Shared by the agent loop and the relay, so a relay answer is billed exactly like an agent
turn's call (the ledger is the one thing a relay keeps).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.agent.cost.budget import SpendGuard
from app.db.store import ApiCallRecord, Store
from app.observe.metrics import Metrics
from app.providers.pricing import Cost, PriceOverride, price_usage
from app.providers.usage import Usage


@dataclass(frozen=True, slots=True)
class CallSite:
    """Where a call is billed: one turn of one session, under one profile."""

    store: Store
    metrics: Metrics
    spend: SpendGuard
    session_id: str
    owner: str
    turn_id: str
    profile: str
    provider: str
    price_override: PriceOverride | None
    end_user: str = ""
    """The end user of `owner` the call is billed to ("" for none)."""


@dataclass(frozen=True, slots=True)
class Timing:
    started: float
    first_byte: float | None


def record_call(
    site: CallSite,
    *,
    model: str,
    usage: Usage,
    timing: Timing,
    outcome: str,
    cache_break: str | None = None,
) -> Cost:
    cost = price_usage(usage, model=model, provider=site.provider, override=site.price_override)
    latency_s = time.monotonic() - timing.started
    ttft_s = timing.first_byte - timing.started if timing.first_byte else None
    site.metrics.observe_call(
        profile=site.profile,
        upstream_model=model,
        usage=usage,
        cost=cost,
        latency_s=latency_s,
        ttft_s=ttft_s,
        outcome=outcome,
    )
    site.spend.add(cost)
    site.store.record_api_call(
        session_id=site.session_id,
        owner=site.owner,
        end_user=site.end_user,
        turn_id=site.turn_id,
        call=ApiCallRecord(
            profile=site.profile,
            upstream_model=model,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cost_usd=cost.amount,
            cost_status=cost.status,
            cost_source=cost.source,
            latency_ms=latency_s * 1000,
            ttft_ms=ttft_s * 1000 if ttft_s is not None else None,
            outcome=outcome,
            cache_break=cache_break,
        ),
    )
    return cost
