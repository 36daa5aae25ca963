"""A turn whose client hung up stops once no retry can come (`TurnHandle.abandon`)."""

from __future__ import annotations

import asyncio

from app.agent.turns.handle import TurnHandle


async def _running(handle: TurnHandle) -> asyncio.Future[None]:
    task: asyncio.Future[None] = asyncio.ensure_future(asyncio.sleep(60))
    handle.task = task  # type: ignore[assignment]  # only cancel() is exercised
    return task


def test_without_a_grace_the_turn_stops_at_the_hangup() -> None:
    async def run() -> bool:
        handle = TurnHandle("t1", "s1")
        task = await _running(handle)
        handle.abandon()
        await asyncio.sleep(0)
        return task.cancelled()

    assert asyncio.run(run())


def test_a_retry_inside_the_grace_keeps_it_and_a_later_hangup_restarts_it() -> None:
    async def run() -> list[bool]:
        handle = TurnHandle("t2", "s2")
        task = await _running(handle)
        seen: list[bool] = []
        handle.abandon(0.2)  # the first attempt's hang-up
        await asyncio.sleep(0.1)
        retry = handle.subscribe()  # the SDK's retry reattaches
        await asyncio.sleep(0.15)  # past the first grace: watched, so still running
        seen.append(task.done())
        handle.unsubscribe(retry)
        handle.abandon(0.2)  # the retry hangs up too: a fresh grace from now
        await asyncio.sleep(0.1)
        seen.append(task.done())
        await asyncio.sleep(0.2)
        seen.append(task.cancelled())
        return seen

    assert asyncio.run(run()) == [False, False, True]
