"""A store tool's change commits with its result, in one unit on the writer thread: both
land, or (the lease gone) neither does. Real SQLite file, the turn's own BatchRunner."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.agent.tool_step import BatchRunner
from app.db.store import LeaseLost, PersistenceError, Store
from app.db.tool_store import todo_state
from app.providers.base import ToolCall
from app.tools.registry import Tool, ToolContext, ToolError, ToolRegistry
from app.tools.todo import TODO
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

LEASE = "lease-1"


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(
        session_id="s1",
        owner="o",
        profile="courier",
        system_prompt="p",
        lease=LEASE,
        lease_ttl_s=600,
    )
    return store


async def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return str(args.get("text", ""))


ECHO = Tool(name="echo", description="Echo.", parameters={"type": "object"}, handler=_echo)


def _runner(store: Store, tmp_path: Path) -> BatchRunner:
    registry = ToolRegistry()
    registry.register(TODO)
    registry.register(ECHO)
    return BatchRunner(
        store=store,
        registry=registry,
        tool_ctx=ToolContext(session_id="s1", workspace=tmp_path, owner="o", store=store),
        lease=LEASE,
        turn_id="t1",
        context_window=100_000,
        emit=lambda _event: None,
    )


def _add(text: str, call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id, "todo", f'{{"action": "add", "items": ["{text}"]}}')


def _results(store: Store) -> list[str]:
    rows = store.active_messages(session_id="s1")
    return [r.content or "" for r in rows if r.role == "tool"]


def test_the_change_and_its_result_commit_together(store: Store, tmp_path: Path) -> None:
    runner = _runner(store, tmp_path)
    [outcome] = asyncio.run(runner.run([_add("check the logs")]))
    assert not outcome.is_error and "check the logs" in outcome.content
    assert [i.text for i in todo_state(store, session_id="s1").items] == ["check the logs"]
    assert _results(store) == [outcome.content]


def test_a_lost_lease_keeps_neither_the_change_nor_the_result(store: Store, tmp_path: Path) -> None:
    runner = _runner(store, tmp_path)
    store.release_lease(session_id="s1", lease=LEASE)
    assert store.acquire_lease(session_id="s1", lease="someone-else", ttl_s=600.0)
    with pytest.raises(LeaseLost):
        asyncio.run(runner.run([_add("should not stay")]))
    # Apart, the list would have changed with no result recording that it did.
    assert todo_state(store, session_id="s1").items == ()
    assert _results(store) == []


def test_each_batch_of_a_turn_stores_its_own_results(store: Store, tmp_path: Path) -> None:
    # One runner per turn, and a batch's calls are numbered from 0 again: the second
    # batch's first call must not pass for stored by the first's.
    runner = _runner(store, tmp_path)
    asyncio.run(runner.run([_add("one", "c1")]))
    asyncio.run(runner.run([ToolCall("c2", "echo", '{"text": "two"}')]))
    assert [i.text for i in todo_state(store, session_id="s1").items] == ["one"]
    assert len(_results(store)) == 2 and _results(store)[-1] == "two"


def test_a_tool_s_failures_become_its_result_but_a_store_failure_does_not(
    tmp_path: Path,
) -> None:
    def refuses(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError("no such item")

    def breaks(args: dict[str, Any], ctx: ToolContext) -> str:
        raise KeyError("bug")

    def store_fails(args: dict[str, Any], ctx: ToolContext) -> str:
        raise PersistenceError("disk full")

    registry, ctx = ToolRegistry(), ToolContext(session_id="s1", workspace=tmp_path)
    for work in (refuses, breaks, store_fails):
        registry.register(Tool(work.__name__, "t", {"type": "object"}, _echo, in_unit=work))
    refused = registry.invoke_in_unit(registry.get("refuses"), {}, ctx)  # type: ignore[arg-type]
    assert (refused.content, refused.is_error) == ("error: no such item", True)
    broken = registry.invoke_in_unit(registry.get("breaks"), {}, ctx)  # type: ignore[arg-type]
    assert broken.content == "error: breaks failed with an internal error" and broken.is_error
    with pytest.raises(PersistenceError):  # the unit rolls back whole
        registry.invoke_in_unit(registry.get("store_fails"), {}, ctx)  # type: ignore[arg-type]

    # The async path maps the same way.
    async def handler_breaks(args: dict[str, Any], ctx: ToolContext) -> str:
        raise KeyError("bug")

    tool = Tool("async_breaks", "t", {"type": "object"}, handler_breaks)
    outcome = asyncio.run(registry.invoke(tool, {}, ctx))
    assert outcome.content == "error: async_breaks failed with an internal error"
