"""A hard spend cap stops a run BEFORE the upstream call that would pass it.

The arithmetic (`SpendGuard.admit`/`settle`, `call_bound.py`) is checked on its own, then
the loop in-process against a scripted provider on a real store: the provider counts the
calls that were sent, so "stopped before" is a count, not a claim.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

from app.agent.cost.budget import Admission, Cap, SpendGuard
from app.agent.cost.call_bound import (
    PER_REQUEST_TOKENS,
    CallBound,
    affordable_output,
    call_cost,
    prompt_bound,
)
from app.agent.events import TurnError, TurnFinished
from app.agent.loop import run_turn
from app.config import PriceOverrideConfig
from app.db.store import Store
from app.providers.base import ModelRequest, SystemBlock, UserMessage
from app.providers.pricing import Cost, PriceOverride, price_usage
from app.providers.usage import Usage
from tests.support.agent import Agent, agent_settings
from tests.support.scripted import Scripted, calls, reply
from tests.unit.test_agent_loop import Lookups

MICRO = Decimal("0.000001")
ONE_PER_MTOK = PriceOverride(
    input_per_mtok=Decimal(1),
    output_per_mtok=Decimal(1),
    cache_read_per_mtok=Decimal(1),
    cache_write_per_mtok=Decimal(1),
)
"""A token costs a micro-dollar, whatever its bucket: costs read as token counts."""


def _price(prompt: int):  # type: ignore[no-untyped-def]
    return lambda n: call_cost(
        CallBound(prompt, n), model="m", provider=None, override=ONE_PER_MTOK
    )


def _guard(limit: str, *, hard: bool = True) -> SpendGuard:
    return SpendGuard([Cap("request", Decimal(limit), Decimal(0), hard=hard)])


def _admit(guard: SpendGuard, prompt: int, most: int = 1000) -> Admission | TurnError | None:
    price = _price(prompt)
    return guard.admit(
        price,
        lambda headroom: affordable_output(price, headroom, most=most),
        max_tokens=most,
        min_tokens=256,
    )


def test_a_call_that_fits_reserves_its_whole_bound() -> None:
    guard = _guard("0.01")
    assert _admit(guard, 2000) == Admission(1000, 3000 * MICRO)
    assert guard.reserved == 3000 * MICRO


def test_a_call_that_fits_only_clamped_is_clamped() -> None:
    guard = _guard("0.0025")
    assert _admit(guard, 2000) == Admission(500, 2500 * MICRO)


def test_a_call_whose_shortest_useful_answer_cannot_fit_is_refused() -> None:
    refused = _admit(_guard("0.00225"), 2000)  # 2000 + 255 > 2250: under 256 output tokens
    assert isinstance(refused, TurnError)
    assert refused.code == "spend_limit_reached"
    assert "256 output tokens" in refused.message


def test_concurrent_admissions_share_one_headroom() -> None:
    guard = _guard("0.0075")  # three calls of 2000 + 1000 would need 0.009
    first, second, third = (_admit(guard, 2000) for _ in range(3))
    assert first == Admission(1000, 3000 * MICRO)
    assert second == Admission(1000, 3000 * MICRO)
    assert isinstance(third, TurnError)  # 1500 left: the prompt fits, 256 output do not
    assert guard.headroom() == 1500 * MICRO


def test_settle_keeps_the_billed_cost_or_the_whole_bound_when_unknown() -> None:
    guard = _guard("1")
    admission = _admit(guard, 2000)
    assert isinstance(admission, Admission)
    billed = Cost(110 * MICRO, "estimated", "test")
    guard.add(billed)
    guard.settle(admission, billed=billed)
    assert (guard.spent_in_turn, guard.reserved) == (110 * MICRO, 0)
    lost = _admit(guard, 2000)
    assert isinstance(lost, Admission)
    guard.settle(lost, billed=None, lost=True)  # failed after its first byte
    assert guard.spent_in_turn == 3110 * MICRO


def test_an_unknown_price_is_refused_and_soft_caps_admit_everything() -> None:
    unknown = SpendGuard([Cap("request", Decimal(1), Decimal(0), hard=True)])
    refused = unknown.admit(lambda n: None, lambda h: 0, max_tokens=100, min_tokens=1)
    assert isinstance(refused, TurnError)
    assert _admit(_guard("0.000001", hard=False), 2000) is None


def test_the_prompt_bound_covers_every_byte_sent() -> None:
    text = "数据 " * 500 + '{"k": [1, 2, 3]}' * 100  # CJK is 3 bytes a character
    request = ModelRequest(
        model="m", system=(SystemBlock("be brief"),), messages=(UserMessage(text),)
    )
    size = len(text.encode()) + len(b"be brief")
    assert prompt_bound(request) >= size + 2 * 16 + PER_REQUEST_TOKENS
    assert prompt_bound(request, tokens_per_byte=2.0) >= 2 * size


def test_call_cost_takes_the_dearer_of_fresh_input_and_cache_writes() -> None:
    dear_writes = dataclasses.replace(ONE_PER_MTOK, cache_write_per_mtok=Decimal(2))
    cost = call_cost(CallBound(1000, 0), model="m", provider=None, override=dear_writes)
    assert cost == 2000 * MICRO


async def _capped_turn(store: Store, tmp_path: Path, agent: Agent, cap: Decimal) -> TurnFinished:
    profile = agent.profiles.resolve("courier").model_copy(
        update={"prices": PriceOverrideConfig(**dataclasses.asdict(ONE_PER_MTOK))}
    )
    req = dataclasses.replace(
        agent.request("what is in the box?"), profile=profile, max_cost_usd=cap, hard_cap=True
    )
    handle = agent.turns.new_handle()
    opened = await store.off_loop(
        lambda: agent.lifecycle.open(req, turn_id=handle.turn_id, emit=handle.publish),
        first=True,
    )
    return await run_turn(opened.context)


async def test_a_hard_cap_stops_the_run_before_the_call_that_would_pass_it(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    # First a generous cap, to learn the two calls' prompt bounds.
    lookups = Lookups()
    step = calls(("c1", "lookup", {"what": "box"}), usage=Usage(input_tokens=100, output_tokens=10))
    measured = scripted(step, reply("a box"))
    agent = Agent(store, agent_settings(tmp_path), measured, tools=[lookups.tool()])
    finished = await _capped_turn(store, tmp_path, agent, Decimal(100))
    assert finished.exit_reason == "completed"
    # Under a hard cap a limit is always sent: the profile's, since the client gave none.
    assert [r.sampling.max_tokens for r in measured.requests] == [8192, 8192]
    first = prompt_bound(measured.requests[0])

    # Now a cap the first call fits only clamped to 300 output tokens; the second call's
    # prompt is longer and the first cost 110, so 256 output tokens no longer fit.
    capped = scripted(step)
    agent = Agent(store, agent_settings(tmp_path), capped, tools=[lookups.tool()])
    finished = await _capped_turn(store, tmp_path, agent, (first + 300) * MICRO)
    assert finished.exit_reason == "spend_limit"
    assert finished.error is not None and finished.error.code == "spend_limit_reached"
    assert len(capped.requests) == 1  # the second call was never sent
    assert capped.requests[0].sampling.max_tokens == 300
    assert lookups.calls == ["box", "box"]


def test_a_model_without_a_cache_write_rate_is_priced_by_its_fresh_input() -> None:
    """OpenAI's models have no cache write rate (caching there is automatic and unbilled as
    writes): the bound must still be known, or no OpenAI model could run under a hard cap."""
    cost = call_cost(CallBound(1000, 100), model="gpt-4o-mini", provider="openai", override=None)
    fresh = price_usage(
        Usage(input_tokens=1000, output_tokens=100), model="gpt-4o-mini", provider="openai"
    )
    assert fresh.amount is not None and cost == fresh.amount
    writes_only = dataclasses.replace(ONE_PER_MTOK, input_per_mtok=None)
    assert call_cost(CallBound(1000, 0), model="m", provider=None, override=writes_only) is None
