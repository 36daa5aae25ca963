"""The compressor on a real SQLite store with injectable clocks: calibration, prune gate and
runway, non-destructive compaction, tool transactions, verdicts and the breaker."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from functools import partial
from pathlib import Path

import pytest

from app.agent.context.cache_planner import StablePrefixRegistry
from app.agent.context.compressor import (
    BLOCK_WINDOW_S,
    MIN_RECLAIM,
    SUMMARY_SCAFFOLD,
    Compressor,
    Estimator,
    observe_response,
    rough_tokens,
    split_for_compaction,
    threshold_tokens,
)
from app.config import Profile
from app.db.models import SessionRow
from app.db.store import NewMessage, Store
from app.providers.base import ModelRequest, ProviderError
from app.providers.usage import Usage
from tests.support.clock import Clock

SID, LEASE = "sess_test", "lease"
PROFILE = Profile(context_window=20_000, max_output_tokens=2_000)  # threshold 13,500


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(session_id=SID, owner="k", profile="courier", system_prompt="SYSTEM")
    assert store.acquire_lease(session_id=SID, lease=LEASE, ttl_s=3600)
    return store


def _session(store: Store) -> SessionRow:
    session = store.get_session(session_id=SID)
    assert session is not None
    return session


def _append(store: Store, *messages: NewMessage) -> None:
    store.append_messages(session_id=SID, lease=LEASE, turn_id=None, messages=list(messages))


def _exchange(store: Store, n: int, *, result_chars: int = 200, filler: str = "x") -> None:
    """One user turn with one tool call and a reply."""
    call = {"id": f"c{n}", "name": "read_file", "arguments": json.dumps({"path": f"f{n}"})}
    _append(
        store,
        NewMessage("user", f"question {n}"),
        NewMessage("assistant", None, tool_calls=[call]),
        NewMessage(
            "tool",
            f"result {n} " + filler * result_chars,
            tool_call_id=f"c{n}",
            tool_name="read_file",
        ),
        NewMessage("assistant", f"answer {n}"),
    )


def _compressor(clock: Clock | None = None) -> Compressor:
    clock = clock or Clock()
    return Compressor(prefixes=StablePrefixRegistry(), clock=clock, wall=clock)


async def _summary(request: ModelRequest) -> tuple[str, Usage | None]:
    assert "## Goal" in request.messages[0].content
    return "## Goal\n- answer the questions", Usage(input_tokens=10, output_tokens=5)


# ------------------------------------------------------------------ estimate and calibration


def test_rough_estimate_counts_cjk_per_code_point() -> None:
    assert rough_tokens("abcd" * 10) == 10
    assert rough_tokens("汉字" * 10) == 20
    assert rough_tokens("ab汉") == 2


def test_threshold_defaults() -> None:
    assert threshold_tokens(PROFILE) == int(18_000 * 0.75)
    big = Profile(context_window=1_000_000, max_output_tokens=8_000)
    assert threshold_tokens(big) == int(992_000 * 0.5)


def test_cjk_session_running_2x_high_does_not_compact_early(store: Store) -> None:
    comp = _compressor()
    threshold = threshold_tokens(PROFILE)
    # The provider billed half of what we estimated: CJK text is cheaper than we think.
    rough_at_call = 9_000
    observe_response(
        store,
        _session(store),
        rough_at_call=rough_at_call,
        usage=Usage(input_tokens=4_500),
        threshold=threshold,
        lease=LEASE,
    )
    rough_now = threshold + 500  # the raw estimate says "over the line"
    assert not comp.needs_compaction(store, _session(store), PROFILE, rough_now, lease=LEASE)
    uncalibrated = PROFILE.model_copy(update={"calibrated_trigger": False})
    assert comp.needs_compaction(store, _session(store), uncalibrated, rough_now, lease=LEASE)


def test_ascii_session_compacts_at_the_right_point(store: Store) -> None:
    comp = _compressor()
    threshold = threshold_tokens(PROFILE)
    observe_response(
        store,
        _session(store),
        rough_at_call=10_000,
        usage=Usage(input_tokens=10_000),
        threshold=threshold,
        lease=LEASE,
    )
    assert not comp.needs_compaction(store, _session(store), PROFILE, threshold - 1, lease=LEASE)
    assert comp.needs_compaction(store, _session(store), PROFILE, threshold, lease=LEASE)


def test_a_floor_over_the_threshold_never_loops(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    comp = _compressor()
    huge = "x" * (threshold_tokens(PROFILE) * 4 + 100)
    store.update_session(session_id=SID, lease=LEASE, system_prompt=huge)
    for _ in range(3):
        assert not comp.needs_compaction(store, _session(store), PROFILE, 10**6, lease=LEASE)
    assert sum("alone" in r.message for r in caplog.records) == 1  # said once


# ------------------------------------------------------------------ prune


async def test_prune_commits_only_a_real_win_and_waits_out_its_runway(store: Store) -> None:
    for n in range(12):
        _exchange(store, n, result_chars=3_000)  # ~750 tokens of old output each
    comp = _compressor()
    rows = store.active_messages(session_id=SID)
    reclaimed = await comp.prune(store, _session(store), PROFILE, lease=LEASE, rows=rows)
    assert reclaimed >= MIN_RECLAIM
    session = _session(store)
    assert session.prune_rearm_at is not None and session.pending_cache_break == "prune"
    live = store.active_messages(session_id=SID)
    stubs = [r for r in live if r.kind == "pruned"]
    assert stubs and all("recall(message_id=" in (r.api_content or "") for r in stubs)
    assert all(len(r.content or "") > 3_000 for r in stubs)  # display text kept in full
    # A restart (a new compressor) does not reset the runway: nothing commits now.
    again = await _compressor().prune(store, _session(store), PROFILE, lease=LEASE, rows=live)
    assert again == 0


async def test_a_small_prune_does_not_commit(store: Store) -> None:
    for n in range(4):
        _exchange(store, n, result_chars=2_500)
    rows = store.active_messages(session_id=SID)
    assert await _compressor().prune(store, _session(store), PROFILE, lease=LEASE, rows=rows) == 0
    assert _session(store).prune_rearm_at is None


async def test_prune_rearms_after_the_prompt_regrows(store: Store) -> None:
    for n in range(12):
        _exchange(store, n, result_chars=3_000)
    comp = _compressor()
    await comp.prune(
        store, _session(store), PROFILE, lease=LEASE, rows=store.active_messages(session_id=SID)
    )
    rearm = _session(store).prune_rearm_at
    assert rearm is not None
    n = 100
    while comp.estimate(_session(store), store.active_messages(session_id=SID)) < rearm:
        _exchange(store, n, result_chars=3_000)
        n += 1
    for m in range(n, n + 12):
        _exchange(store, m, result_chars=3_000)
    rows = store.active_messages(session_id=SID)
    assert await comp.prune(store, _session(store), PROFILE, lease=LEASE, rows=rows) >= MIN_RECLAIM


# ------------------------------------------------------------------ compaction


async def test_compaction_archives_and_never_deletes(store: Store, db_path: Path) -> None:
    for n in range(30):
        _exchange(store, n, result_chars=400, filler=f"zebra{n} ")
    before = len(store.debug_dump(session_id=SID))
    comp = _compressor()
    prompt = await comp.compact(
        store,
        _session(store),
        PROFILE,
        lease=LEASE,
        rows=store.active_messages(session_id=SID),
        summarise=_summary,
        rebuild_prompt=lambda: "REBUILT",
    )
    assert prompt == "REBUILT"
    rows = store.debug_dump(session_id=SID)
    assert len(rows) > before  # nothing deleted, summary and tail copies added
    live = store.active_messages(session_id=SID)
    summary = [r for r in live if r.kind == "summary"]
    assert len(summary) == 1 and (summary[0].content or "").startswith(SUMMARY_SCAFFOLD)
    assert live[0].content == "question 0"  # the head stays
    session = _session(store)
    assert session.system_prompt == "REBUILT" and session.verdict_pending
    assert session.pending_cache_break == "compaction" and session.compactions == 1
    # Archived rows stay searchable; retracted ones do not. (A search waits on the store's
    # writer thread, so not on the event loop.)
    search = partial(store.search_messages, session_id=SID, query="zebra3")
    assert await asyncio.to_thread(search)
    con = sqlite3.connect(db_path)
    con.execute("UPDATE message SET compacted = 0 WHERE active = 0 AND content LIKE '%zebra3 %'")
    con.commit()
    assert not await asyncio.to_thread(search)


async def test_summariser_failure_falls_back_and_counts(store: Store) -> None:
    for n in range(30):
        _exchange(store, n, result_chars=2_000)

    async def broken(request: ModelRequest) -> tuple[str, Usage | None]:
        raise ProviderError("server_error", "boom")

    clock = Clock()
    comp = _compressor(clock)
    await comp.compact(
        store,
        _session(store),
        PROFILE,
        lease=LEASE,
        rows=store.active_messages(session_id=SID),
        summarise=broken,
        rebuild_prompt=lambda: "P",
    )
    session = _session(store)
    assert session.fallback_streak == 1 and session.summary_cooldown_until > clock.now
    summary = next(r for r in store.active_messages(session_id=SID) if r.kind == "summary")
    assert "without a model summary" in (summary.content or "")
    assert session.verdict_pending  # a fallback still gets its verdict


async def test_a_middle_too_small_to_summarise_is_streak_neutral(store: Store) -> None:
    for n in range(40):
        _exchange(store, n, result_chars=40)
    store.update_session(session_id=SID, lease=LEASE, fallback_streak=1)
    called: list[int] = []

    async def summarise(request: ModelRequest) -> tuple[str, Usage | None]:
        called.append(1)
        return "x", None

    small = PROFILE.model_copy(update={"context_window": 4_000, "max_output_tokens": 500})
    await _compressor().compact(
        store,
        _session(store),
        small,
        lease=LEASE,
        rows=store.active_messages(session_id=SID),
        summarise=summarise,
        rebuild_prompt=lambda: "P",
    )
    session = _session(store)
    assert not called and session.fallback_streak == 1 and session.verdict_pending


def test_tool_transactions_are_never_split() -> None:
    from app.db.store import StoredMessage

    def row(i: int, role: str, **kw: object) -> StoredMessage:
        return StoredMessage(
            i,
            role,
            kw.get("content", "c" * 400),
            None,  # type: ignore[arg-type]
            tuple(kw.get("calls", ())),
            kw.get("call_id"),
            "t",  # type: ignore[arg-type]
            False,
            None,
        )

    rows = [row(1, "user"), row(2, "assistant")]
    i = 3
    for n in range(20):
        calls = [{"id": f"{n}-{k}", "name": "t", "arguments": "{}"} for k in range(3)]
        rows.append(row(i, "assistant", calls=calls, content=None))
        rows += [row(i + 1 + k, "tool", call_id=f"{n}-{k}") for k in range(3)]
        i += 4
    rows.append(row(i, "user"))
    for budget in range(50, 2_000, 37):
        split = split_for_compaction(rows, Estimator(), tail_tokens=budget)
        assert split.tail[0].role != "tool"
        assert split.middle == [] or split.middle[-1].role == "tool"
        assert split.tail[-1].role == "user"


# ------------------------------------------------------------------ verdict and breaker


def _verdict(store: Store, billed: int | None) -> None:
    usage = Usage(input_tokens=billed) if billed is not None else None
    observe_response(
        store,
        _session(store),
        rough_at_call=1,
        usage=usage,
        threshold=threshold_tokens(PROFILE),
        lease=LEASE,
    )


def test_a_response_without_usage_consumes_the_latch(store: Store) -> None:
    store.update_session(session_id=SID, lease=LEASE, verdict_pending=True)
    _verdict(store, None)
    session = _session(store)
    assert not session.verdict_pending and session.compaction_strikes == 0
    _verdict(store, 10**6)  # a later reading is not charged to that compaction
    assert _session(store).compaction_strikes == 0


def test_breaker_trips_after_two_ineffective_verdicts_and_allows_one_probation(
    store: Store,
) -> None:
    clock = Clock()
    comp = _compressor(clock)
    over = threshold_tokens(PROFILE) + 1_000
    for _ in range(2):
        assert comp.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)
        store.update_session(session_id=SID, lease=LEASE, verdict_pending=True)
        _verdict(store, over)  # compaction ran; the prompt stayed over the line
    assert _session(store).compaction_strikes == 2
    assert not comp.needs_compaction(
        store, _session(store), PROFILE, over, lease=LEASE
    )  # arms deadline
    clock.now += BLOCK_WINDOW_S - 1
    assert not comp.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)
    # A restart does not reset it: a fresh process starts a full window blocked.
    restarted = _compressor(clock)
    assert not restarted.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)
    clock.now += 2
    assert comp.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)  # probation
    assert _session(store).compaction_strikes == 1
    store.update_session(session_id=SID, lease=LEASE, verdict_pending=True)
    _verdict(store, over)  # the probe failed too: re-tripped at once
    assert not comp.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)
    clock.now += 10
    assert not comp.needs_compaction(store, _session(store), PROFILE, over, lease=LEASE)


def test_two_fallback_summaries_trip_the_breaker_too(store: Store) -> None:
    comp = _compressor()
    store.update_session(session_id=SID, lease=LEASE, fallback_streak=2)
    assert not comp.needs_compaction(store, _session(store), PROFILE, 10**6, lease=LEASE)


def test_an_effective_verdict_resets_strikes(store: Store) -> None:
    store.update_session(session_id=SID, lease=LEASE, compaction_strikes=1, verdict_pending=True)
    _verdict(store, 100)
    assert _session(store).compaction_strikes == 0


async def test_a_summary_skipped_for_spend_is_streak_neutral(store: Store) -> None:
    from app.agent.context.compressor import SummarySkipped

    for n in range(30):
        _exchange(store, n, result_chars=2_000)
    store.update_session(session_id=SID, lease=LEASE, fallback_streak=1)

    async def capped(request: ModelRequest) -> tuple[str, Usage | None]:
        raise SummarySkipped("spend cap")

    await _compressor().compact(
        store,
        _session(store),
        PROFILE,
        lease=LEASE,
        rows=store.active_messages(session_id=SID),
        summarise=capped,
        rebuild_prompt=lambda: "P",
    )
    session = _session(store)
    assert session.fallback_streak == 1 and session.summary_cooldown_until == 0
    assert session.verdict_pending
