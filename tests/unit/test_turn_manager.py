"""The turn manager, in-process: turns run as tasks the server owns, each closed by one
commit that stores the reply, records the finish and releases the lease, also when the turn
is cancelled mid-tool or mid-reply. A real store, the real loop, a scripted provider.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.agent.events import ToolStarted, TurnFinished, TurnText
from app.agent.refusals import SessionBusy
from app.agent.reply_store import CANCELLED_RESULT
from app.agent.turns.handle import TurnHandle
from app.db.store import Store
from app.providers.base import TextDelta, UsageEvent
from app.providers.pricing import Cost
from app.providers.usage import Usage
from app.tools.registry import Tool, ToolContext
from tests.support.agent import Agent, agent_settings, timeless
from tests.support.scripted import USAGE, Hold, Scripted, calls, reply

WAIT_ARGS = {"for": "ever"}


class Waiter:
    """A tool that waits until the turn is cancelled; `started` is set once it runs."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("only a cancellation ends this wait")

    def tool(self) -> Tool:
        return Tool("wait", "Wait.", {"type": "object"}, self)


def _turn_rows(db_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute("SELECT id, exit_reason, iterations, error FROM turn").fetchall()


def _lease(store: Store, session_id: str) -> str | None:
    session = store.get_session(session_id=session_id)
    assert session is not None
    return session.lease


async def _end(handle: TurnHandle) -> TurnFinished:
    assert handle.task is not None
    return await handle.task


async def test_a_turn_is_closed_by_one_commit_with_its_reply(
    store: Store, db_path: Path, tmp_path: Path, scripted: Scripted
) -> None:
    agent = Agent(store, agent_settings(tmp_path), scripted(reply("Hello there.")))
    handle = await agent.launch("hi")
    finished = await _end(handle)
    assert finished.exit_reason == "completed"
    # The whole stream a subscriber replays: the text, then the outcome itself.
    assert timeless(handle.history()) == [TurnText("Hello there."), finished]
    assert agent.transcript(handle.session_id) == [
        ("user", "hi", [], None, False),
        ("assistant", "Hello there.", [], None, False),
    ]
    assert _turn_rows(db_path) == [(handle.turn_id, "completed", 1, None)]
    assert _lease(store, handle.session_id) is None
    assert not agent.turns.running and agent.turns.latest_for(handle.session_id) is handle


async def test_a_tool_turn_stores_the_call_its_result_and_the_answer(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    async def look(args: dict[str, Any], ctx: ToolContext) -> str:
        return "found box"

    tool = Tool("lookup", "Look a thing up.", {"type": "object"}, look)
    provider = scripted(calls(("c1", "lookup", {"what": "box"})), reply("A box."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[tool])
    handle = await agent.launch("what is it?")
    finished = await _end(handle)
    assert (finished.exit_reason, finished.tools_ran, finished.upstream_calls) == (
        "completed",
        1,
        2,
    )
    call = {"id": "c1", "name": "lookup", "arguments": json.dumps({"what": "box"})}
    assert agent.transcript(handle.session_id) == [
        ("user", "what is it?", [], None, False),
        ("assistant", None, [call], None, False),
        ("tool", "found box", [], "c1", False),
        ("assistant", "A box.", [], None, False),
    ]


async def test_cancelled_mid_tool_the_call_is_closed_and_the_lease_released(
    store: Store, db_path: Path, tmp_path: Path, scripted: Scripted
) -> None:
    waiter = Waiter()
    provider = scripted(calls(("w1", "wait", WAIT_ARGS), text="Waiting."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[waiter.tool()])
    handle = await agent.launch("wait for me")
    await waiter.started.wait()
    handle.cancel()
    finished = await _end(handle)
    assert (finished.exit_reason, finished.error) == ("cancelled", None)
    # Started, never finished: the end says why.
    assert timeless(handle.history()) == [TurnText("Waiting."), ToolStarted("w1", "wait"), finished]
    call = {"id": "w1", "name": "wait", "arguments": json.dumps(WAIT_ARGS)}
    # The next request finds a whole transcript: the call answered, its effect unknown.
    assert agent.transcript(handle.session_id) == [
        ("user", "wait for me", [], None, False),
        ("assistant", "Waiting.", [call], None, False),
        ("tool", CANCELLED_RESULT, [], "w1", True),
    ]
    assert _turn_rows(db_path) == [(handle.turn_id, "cancelled", 1, None)]
    assert _lease(store, handle.session_id) is None


async def test_cancelled_mid_reply_the_text_so_far_is_kept(
    store: Store, db_path: Path, tmp_path: Path, scripted: Scripted
) -> None:
    hold = Hold()
    provider = scripted((TextDelta("Once upon"), hold, UsageEvent(USAGE)))
    agent = Agent(store, agent_settings(tmp_path), provider)
    handle = await agent.launch("tell me a story")
    await hold.reached.wait()
    handle.cancel()
    finished = await _end(handle)
    expected = TurnFinished("cancelled", "stop", Usage(), Cost.zero(), 0, iterations=1)
    assert replace(finished, cost=Cost.zero()) == expected
    assert timeless(handle.history()) == [TurnText("Once upon"), finished]
    assert agent.transcript(handle.session_id) == [
        ("user", "tell me a story", [], None, False),
        ("assistant", "Once upon", [], None, False),
    ]
    assert _turn_rows(db_path) == [(handle.turn_id, "cancelled", 1, None)]
    assert _lease(store, handle.session_id) is None


async def test_a_session_runs_one_turn_at_a_time(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    """The running turn holds the session's lease: a second turn on it is refused, not
    interleaved; once the first has closed, the session takes the next one."""
    waiter = Waiter()
    provider = scripted(calls(("w1", "wait", WAIT_ARGS)), reply("Next."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[waiter.tool()])
    first = await agent.launch("wait for me")
    await waiter.started.wait()
    with pytest.raises(SessionBusy):
        await agent.launch("me too", session_id=first.session_id)
    first.cancel()
    await _end(first)
    second = await agent.launch("me too", session_id=first.session_id)
    assert (await _end(second)).exit_reason == "completed"
    assert [row[0] for row in agent.transcript(first.session_id)] == [
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
