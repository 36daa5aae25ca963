"""Tool slots (app/tools/capacity.py): process-spawning calls queue for the machine's places
in arrival order; a cancelled waiter leaves the queue; only spawning tools wait."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.tools import capacity
from app.tools.capacity import ToolSlots, machine_slots
from app.tools.registry import Tool, ToolContext, ToolRegistry

GiB = 1024**3


def test_machine_slots_follow_cores_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity, "_memory_bytes", lambda: 24 * GiB)
    assert machine_slots(2 * GiB, cpus=2) == 4  # by cores
    assert machine_slots(2 * GiB, cpus=64) == 12  # by memory
    monkeypatch.setattr(capacity, "_memory_bytes", lambda: 1 * GiB)
    assert machine_slots(2 * GiB, cpus=1) == 2  # never below two


def test_slots_are_given_in_arrival_order_and_counted() -> None:
    busy: list[int] = []
    waits: list[float] = []

    async def scenario() -> list[int]:
        slots = ToolSlots(1, on_busy=busy.append, on_waited=waits.append)
        order: list[int] = []
        release = asyncio.Event()

        async def call(n: int) -> None:
            async with slots.hold():
                order.append(n)
                await release.wait()

        tasks = []
        for n in range(5):
            tasks.append(asyncio.create_task(call(n)))
            await asyncio.sleep(0)  # each asks before the next
        assert order == [0] and slots.busy == 1
        release.set()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]
    assert busy == [1, 0] * 5 and len(waits) == 5


def test_a_call_cancelled_while_queued_never_runs_nor_keeps_a_place() -> None:
    async def scenario() -> list[str]:
        slots = ToolSlots(1)
        ran: list[str] = []
        release = asyncio.Event()

        async def call(name: str) -> None:
            async with slots.hold():
                ran.append(name)
                await release.wait()

        first = asyncio.create_task(call("first"))
        await asyncio.sleep(0)
        queued = asyncio.create_task(call("cancelled"))
        last = asyncio.create_task(call("last"))
        await asyncio.sleep(0)
        queued.cancel()
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, last)
        assert queued.cancelled() and slots.busy == 0
        return ran

    assert asyncio.run(scenario()) == ["first", "last"]


def _tool(name: str, spawns: bool, log: list[str], gate: asyncio.Event) -> Tool:
    async def handler(_args: dict[str, Any], _ctx: ToolContext) -> str:
        log.append(f"{name} runs")
        await gate.wait()
        return name

    return Tool(name, "", {"type": "object"}, handler, spawns_process=spawns)


def test_only_spawning_tools_wait_and_views_share_the_slots(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        log: list[str] = []
        gate = asyncio.Event()
        slots = ToolSlots(1)
        registry = ToolRegistry(
            [_tool("shell", True, log, gate), _tool("read", False, log, gate)], slots=slots
        )
        view = registry.restricted_to(["shell", "read"])
        ctx = ToolContext(session_id="s", workspace=tmp_path)
        shell, read = registry.get("shell"), registry.get("read")
        assert shell is not None and read is not None
        calls = [
            asyncio.create_task(registry.invoke(shell, {}, ctx)),
            asyncio.create_task(view.invoke(shell, {}, ctx)),  # another session's view
            asyncio.create_task(view.invoke(read, {}, ctx)),
        ]
        for _ in range(3):
            await asyncio.sleep(0)
        assert log == ["shell runs", "read runs"]  # the second shell waits, the read does not
        gate.set()
        outcomes = await asyncio.gather(*calls)
        assert [o.content for o in outcomes] == ["shell", "shell", "read"]
        return log

    assert asyncio.run(scenario()) == ["shell runs", "read runs", "shell runs"]
