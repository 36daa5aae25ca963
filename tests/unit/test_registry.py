"""The registry's availability cache is asymmetric: one flaky probe cannot shrink it."""

from __future__ import annotations

from typing import Any

from app.tools.registry import Tool, ToolContext, ToolRegistry
from tests.support.clock import Clock


async def _handler(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


def _tool(probe: list[bool], calls: list[int]) -> Tool:
    def available() -> bool:
        calls.append(1)
        return probe[0]

    return Tool("flaky", "", {"type": "object"}, _handler, available=available)


def test_results_are_cached_for_thirty_seconds() -> None:
    clock, probe, calls = Clock(), [True], []
    registry = ToolRegistry([_tool(probe, calls)], clock=clock)
    assert registry.names() == ["flaky"]
    clock.now += 29
    probe[0] = False
    assert registry.names() == ["flaky"] and len(calls) == 1


def test_a_failure_soon_after_a_success_is_forgiven_and_reprobed() -> None:
    clock, probe, calls = Clock(), [True], []
    registry = ToolRegistry([_tool(probe, calls)], clock=clock)
    assert registry.names() == ["flaky"]
    clock.now += 31
    probe[0] = False
    assert registry.names() == ["flaky"]  # within 60 s of the last success: still offered
    assert registry.names() == ["flaky"] and len(calls) == 3  # ...and probed again at once
    clock.now += 30  # now 61 s after the last success
    assert registry.names() == []
    clock.now += 10
    assert registry.names() == [] and len(calls) == 4  # a real failure is cached


def test_a_tool_that_never_worked_is_not_offered() -> None:
    clock, probe, calls = Clock(), [False], []
    registry = ToolRegistry([_tool(probe, calls)], clock=clock)
    assert registry.names() == []
    probe[0] = True
    clock.now += 31
    assert registry.names() == ["flaky"]


def test_a_probe_that_raises_counts_as_unavailable() -> None:
    def boom() -> bool:
        raise OSError("probe exploded")

    registry = ToolRegistry([Tool("x", "", {}, _handler, available=boom)])
    assert registry.names() == []
