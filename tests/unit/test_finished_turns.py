"""What the server keeps of a finished turn: its events, sealed compactly, equal on replay;
and the twin map forgets a turn once no retry window can reach it.

A busy server keeps thousands of finished turns (for a reattaching retry and
`/v1/sessions/{id}/events`); each text delta was an object of its own, held until 10,000
newer turns pushed the turn out, so the memory and the collector's walk grew with traffic.
"""

from __future__ import annotations

import gc
import time
from decimal import Decimal
from pathlib import Path

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ClientToolCalls,
    ToolFinished,
    ToolStarted,
    TurnError,
    TurnEvent,
    TurnFinished,
    TurnReasoning,
    TurnText,
)
from app.agent.turns.handle import SealedHistory, TurnHandle
from app.agent.turns.manager import MAX_REMEMBERED, RETRY_WINDOW_S, RUNNING_PASSED, TurnManager
from app.db.store import Store
from app.observe.metrics import Metrics
from app.providers.base import ToolCall
from app.providers.pricing import Cost
from app.providers.usage import Usage

FINISHED = TurnFinished(
    "completed",
    "stop",
    Usage(input_tokens=12, output_tokens=7, cache_read_tokens=3),
    Cost(Decimal("0.000123456789"), "estimated", "genai-prices 0.2.3"),
    2,
    iterations=2,
    tools_ran=1,
)

EVENTS: list[TurnEvent] = [
    TurnText(""),
    TurnReasoning("thinking…"),
    TurnText("Hel"),
    TurnText("lo, wörld \u2028 "),
    TurnText(""),
    ToolStarted("call_1", "terminal"),
    ApprovalRequested("ap_1", "call_1", "terminal", "rm -rf x", 1.5e9, grantable=False),
    ApprovalResolved("ap_1", "call_1", "denied"),
    ToolFinished("call_1", "terminal", True, 12.5),
    TurnText("🙂 done"),
    ClientToolCalls((ToolCall("call_2", "lookup", '{"q": 1}'),)),
    TurnFinished(
        "upstream_error",
        "stop",
        Usage(),
        Cost.zero(),
        1,
        error=TurnError("slow down", "rate_limit_error", "rate_limited", True, 2.0),
    ),
    FINISHED,
]


def test_a_sealed_history_gives_back_equal_events_in_order() -> None:
    sealed = SealedHistory.of(EVENTS)
    assert sealed.events() == tuple(EVENTS)
    assert len(sealed) == len(EVENTS)
    assert SealedHistory.of([]).events() == ()


def test_a_finished_handle_replays_the_same_events_from_any_point() -> None:
    live = TurnHandle("turn_a", "s-1")
    sealed = TurnHandle("turn_b", "s-1")
    for event in EVENTS:
        live.publish(event)
        sealed.publish(event)
    sealed.seal()
    assert sealed.history() == live.history() == tuple(EVENTS)
    assert sealed.event_count() == live.event_count() == len(EVENTS)
    for after in (0, 1, 5, len(EVENTS) - 1, len(EVENTS)):
        queue = sealed.subscribe(after)
        assert [queue.get_nowait() for _ in range(queue.qsize())] == EVENTS[after:]
    # An event after the seal (not expected) is kept, not lost.
    sealed.publish(TurnText("late"))
    assert sealed.history() == (*EVENTS, TurnText("late"))


def _manager(tmp_path: Path) -> TurnManager:
    return TurnManager(Store.open(tmp_path / "courier.db"), Metrics())


def _finished(turns: TurnManager, owner: str, digest: str, age_s: float) -> TurnHandle:
    handle = turns.new_handle()
    turns.remember_twin(handle, owner, digest)
    handle.outcome = FINISHED
    handle.finished_at = time.monotonic() - age_s
    return handle


def test_a_turn_past_every_retry_window_is_forgotten(tmp_path: Path) -> None:
    turns = _manager(tmp_path)
    old = _finished(turns, "alice", "d-old", RETRY_WINDOW_S + 1)
    running = turns.new_handle()  # remembered before the old one ends: order must not matter
    turns.remember_twin(running, "alice", "d-running")
    recent = _finished(turns, "alice", "d-recent", 1.0)
    # A retry within its window still finds the recent one (and the running one).
    assert turns.find_twin("alice", "d-recent", marked_retry=True) is recent
    assert turns.find_twin("alice", "d-old", marked_retry=True) is None
    _finished(turns, "bob", "d-next", 0.0)  # any new turn sweeps what no window reaches
    assert turns.find_twin("alice", "d-running", marked_retry=False) is running
    assert turns.find_twin("alice", "d-recent", marked_retry=True) is recent
    assert ("alice", "d-old") not in turns._by_digest
    assert old not in turns._by_digest.values()


def test_the_twin_map_stays_bounded_by_count_too(tmp_path: Path) -> None:
    turns = _manager(tmp_path)
    for i in range(MAX_REMEMBERED + 5):
        _finished(turns, "alice", f"d-{i}", 1.0)
    assert len(turns._by_digest) == MAX_REMEMBERED
    assert ("alice", "d-0") not in turns._by_digest


def test_the_sweep_steps_past_a_few_running_turns_per_new_one(tmp_path: Path) -> None:
    turns = _manager(tmp_path)
    running = []
    for i in range(20):
        handle = turns.new_handle()
        turns.remember_twin(handle, "alice", f"d-run-{i}")
        running.append(handle)
    _finished(turns, "alice", "d-old", RETRY_WINDOW_S + 1)
    before = list(turns._by_digest)
    turns.remember_twin(turns.new_handle(), "bob", "d-new-0")
    # Only RUNNING_PASSED of the twenty went to the back: no walk over every running turn.
    moved = [key for key in before if list(turns._by_digest).index(key) > before.index(key)]
    assert len(moved) == RUNNING_PASSED
    for i in range(1, 4):
        turns.remember_twin(turns.new_handle(), "bob", f"d-new-{i}")
    assert ("alice", "d-old") not in turns._by_digest
    assert all(turns.find_twin("alice", f"d-run-{i}", marked_retry=False) for i in range(20))


def test_reasoning_runs_are_sealed_as_one_string_too() -> None:
    # A model that thinks aloud sends thousands of reasoning deltas before its answer.
    events: list[TurnEvent] = [TurnReasoning(f"step {i}; ") for i in range(2000)]
    events += [TurnText("answer"), FINISHED]
    sealed = SealedHistory.of(events)
    assert sealed.events() == tuple(events)
    assert sealed._others == (FINISHED,)
    # One string per kind and 8 bytes of layout per event, not an object per delta.
    thoughts = "".join(e.text for e in events if isinstance(e, TurnReasoning))
    assert sealed.nbytes < len(thoughts) + 8 * len(events) + 2000


def _closed(turns: TurnManager, session: str, text: str, *, key: str | None = None) -> TurnHandle:
    """A turn through the manager's own start and close, answering `text`."""
    handle = turns.new_handle()
    handle.session_id = session
    turns._track(handle)
    turns.remember_twin(handle, "alice", f"digest-{handle.turn_id}")
    if key is not None:
        turns.remember(handle, "alice", key, f"digest-{handle.turn_id}")
    handle.publish(TurnText(text))
    turns.running.pop(handle.turn_id)
    turns._close(handle, FINISHED)
    return handle


def _remembered(turns: TurnManager, handle: TurnHandle) -> list[str]:
    where = []
    if turns.latest_for(handle.session_id) is handle:
        where.append("latest")
    if handle in turns._by_key.values():
        where.append("by_key")
    if handle in turns._by_digest.values():
        where.append("by_digest")
    return where


def test_finished_turns_are_held_to_a_byte_budget(tmp_path: Path) -> None:
    turns = TurnManager(Store.open(tmp_path / "courier.db"), Metrics(), max_kept_bytes=200_000)
    answer = "x" * 30_000  # about 32 KB kept per turn with its handle
    handles = [_closed(turns, f"s-{i}", answer, key=f"k-{i}") for i in range(20)]
    assert turns.kept.bytes <= 200_000
    kept = [h for h in handles if _remembered(turns, h)]
    # The newest stay, whole, in every map; the oldest are gone from all of them.
    assert kept == handles[-len(kept) :]
    assert 4 <= len(kept) <= 6
    assert all(_remembered(turns, h) == ["latest", "by_key", "by_digest"] for h in kept)
    assert turns.latest_for("s-0") is None
    assert turns.find("alice", "k-0") is None
    assert turns.find("alice", "k-19") is handles[-1]
    assert turns.latest_for("s-19") is not None
    assert turns.latest_for("s-19").history() == (TurnText(answer), FINISHED)  # type: ignore[union-attr]


def test_the_budget_never_forgets_a_session_s_newer_turn(tmp_path: Path) -> None:
    turns = TurnManager(Store.open(tmp_path / "courier.db"), Metrics(), max_kept_bytes=100_000)
    old = _closed(turns, "s-1", "x" * 40_000)
    newer = _closed(turns, "s-1", "short")  # the same session's next turn
    for i in range(2):  # the second pushes the oldest out, and only it
        _closed(turns, f"s-other-{i}", "x" * 40_000)
    assert _remembered(turns, old) == []
    assert _remembered(turns, newer) == ["latest", "by_digest"]


def test_a_single_turn_over_the_budget_stays_until_the_next(tmp_path: Path) -> None:
    turns = TurnManager(Store.open(tmp_path / "courier.db"), Metrics(), max_kept_bytes=10_000)
    big = _closed(turns, "s-1", "x" * 50_000)
    assert _remembered(turns, big) == ["latest", "by_digest"]
    small = _closed(turns, "s-2", "hello")
    assert _remembered(turns, big) == []
    assert _remembered(turns, small) == ["latest", "by_digest"]


def test_a_turn_the_maps_forgot_leaves_the_account(tmp_path: Path) -> None:
    turns = TurnManager(Store.open(tmp_path / "courier.db"), Metrics())
    first = _closed(turns, "s-1", "x" * 10_000)
    charged = turns.kept.bytes
    assert charged > 10_000 and len(turns.kept) == 1
    # Pushed out by the maps themselves (here: forgotten), then freed.
    turns._forget(first)
    del first
    gc.collect()
    _closed(turns, "s-2", "hello")
    assert len(turns.kept) == 1
    assert turns.kept.bytes < charged


async def test_a_finished_turn_keeps_its_outcome_not_its_task(tmp_path: Path) -> None:
    """Once a turn's task is done, a plain future with its outcome takes the task's place:
    waiting on it, stopping it or reattaching to it behaves as before, without the task's
    coroutine and context kept for every finished turn."""
    import asyncio

    turns = _manager(tmp_path)

    async def answer(_handle: TurnHandle) -> TurnFinished:
        return FINISHED

    async def hang(_handle: TurnHandle) -> TurnFinished:
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    done = turns.start_task("sess_a", answer, profile="p")
    task = done.task
    assert isinstance(task, asyncio.Task)
    assert await done.wait() is FINISHED
    await asyncio.sleep(0)  # the done callback runs on the next loop turn
    assert not isinstance(done.task, asyncio.Task) and done.task is not None
    assert done.task.result() is FINISHED and await done.wait() is FINISHED
    done.cancel()  # a finished turn: nothing to stop
    assert done.task.result() is FINISHED

    stopped = turns.start_task("sess_b", hang, profile="p")
    await asyncio.sleep(0)
    stopped.cancel()
    assert stopped.task is not None
    await asyncio.wait({stopped.task})
    await asyncio.sleep(0)
    assert not isinstance(stopped.task, asyncio.Task) and stopped.task.cancelled()
    turns.store.close()
