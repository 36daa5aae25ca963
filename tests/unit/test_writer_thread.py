"""The store's writer thread: first-come order, except that a turn's opening goes ahead of
the ordinary units still waiting (app/db/writer.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from app.db.store import Store
from app.db.writer import WriterThread


def _blocked(writer: WriterThread) -> threading.Event:
    """Hold the thread in a unit until the returned event is set."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(10)

    writer.submit(hold)
    assert started.wait(10)
    return release


def test_an_opening_runs_before_the_units_queued_ahead_of_it() -> None:
    writer = WriterThread("test-writer")
    ran: list[str] = []
    release = _blocked(writer)
    done = [writer.submit(ran.append, name) for name in ("close-a", "close-b")]
    done += [writer.submit_first(lambda n=name: ran.append(n)) for name in ("open-1", "open-2")]
    done.append(writer.submit(ran.append, "close-c"))
    release.set()
    for future in done:
        future.result(10)
    writer.shutdown()
    # Openings keep their order among themselves, and so do the other units.
    assert ran == ["open-1", "open-2", "close-a", "close-b", "close-c"]


def test_with_nothing_first_units_keep_their_order() -> None:
    writer = WriterThread("test-writer")
    ran: list[int] = []
    futures = [writer.submit(ran.append, n) for n in range(200)]
    for future in futures:
        future.result(10)
    writer.shutdown()
    assert ran == list(range(200))


def test_shutdown_runs_what_is_queued_then_refuses_more() -> None:
    writer = WriterThread("test-writer")
    ran: list[str] = []
    release = _blocked(writer)
    writer.submit(ran.append, "queued")
    writer.submit_first(lambda: ran.append("first"))
    release.set()
    writer.shutdown(wait=True)
    assert ran == ["first", "queued"]
    with pytest.raises(RuntimeError):
        writer.submit(ran.append, "late")
    with pytest.raises(RuntimeError):
        writer.submit_first(lambda: None)


def test_a_failing_unit_reaches_its_caller_and_the_thread_goes_on() -> None:
    writer = WriterThread("test-writer")

    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        writer.submit(fail).result(10)
    assert writer.submit(lambda: 7).result(10) == 7
    writer.shutdown()


def test_the_initializer_runs_on_the_thread_before_any_unit() -> None:
    names: list[str] = []
    writer = WriterThread("test-writer", initializer=lambda: names.append("init"))
    assert writer.submit(lambda: threading.current_thread().name).result(10) == "test-writer"
    writer.shutdown()
    assert names == ["init"]


def test_a_cancelled_unit_never_runs() -> None:
    writer = WriterThread("test-writer")
    ran: list[str] = []
    release = _blocked(writer)
    future = writer.submit(ran.append, "cancelled")
    assert future.cancel()
    writer.submit(ran.append, "kept")
    release.set()
    writer.shutdown()
    assert ran == ["kept"]


def test_the_store_opens_turns_ahead_of_queued_closings(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "courier.db")
    ran: list[str] = []

    async def main() -> None:
        started, release = threading.Event(), threading.Event()

        def hold() -> None:
            started.set()
            release.wait(10)

        holding = asyncio.ensure_future(store.off_loop(hold))
        await asyncio.to_thread(started.wait, 10)
        closing = asyncio.ensure_future(store.off_loop(lambda: ran.append("closing")))
        opening = asyncio.ensure_future(store.off_loop(lambda: ran.append("opening"), first=True))
        await asyncio.sleep(0)  # both submitted before the writer is free
        release.set()
        await asyncio.gather(holding, closing, opening)

    asyncio.run(main())
    store.close()
    assert ran == ["opening", "closing"]


async def test_units_for_the_loop_keep_the_lanes_and_report_back() -> None:
    writer = WriterThread("test-writer")
    ran: list[str] = []
    release = _blocked(writer)
    closing = writer.run_async(lambda: ran.append("close") or "closed")
    opening = writer.run_async(lambda: ran.append("open") or "opened", first=True)

    def fail() -> None:
        raise ValueError("refused")

    failing = writer.run_async(fail)
    release.set()
    assert await opening == "opened" and await closing == "closed"
    with pytest.raises(ValueError, match="refused"):
        await failing
    writer.shutdown()
    assert ran == ["open", "close"]


async def test_a_unit_cancelled_before_it_starts_never_runs() -> None:
    writer = WriterThread("test-writer")
    ran: list[str] = []
    release = _blocked(writer)
    dropped = writer.run_async(lambda: ran.append("dropped"))
    kept = writer.run_async(lambda: ran.append("kept"))
    dropped.cancel()
    release.set()
    await kept
    writer.shutdown()
    assert ran == ["kept"]


async def test_a_unit_cancelled_while_it_runs_still_finishes_and_is_not_reported() -> None:
    writer = WriterThread("test-writer")
    started, release, ran = threading.Event(), threading.Event(), []

    def slow() -> str:
        started.set()
        release.wait(10)
        ran.append("slow")
        return "done"

    running = writer.run_async(slow)
    await asyncio.to_thread(started.wait, 10)
    running.cancel()
    release.set()
    await writer.run_async(lambda: None)  # after the slow one, in order
    writer.shutdown()
    assert ran == ["slow"] and running.cancelled()
