"""`run_turn`, in-process: the loop against a scripted provider, on a real store.

Each turn is opened the way a request opens one (`SessionLifecycle.open`, on the store's
writer thread) and run by calling `run_turn` itself; the tests assert what the model was
sent (whole requests, the system prompt aside: it is the same for every call of a session,
which is checked instead), what the client was told (every event), and what was stored.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.agent.events import (
    ExitReason,
    ToolFinished,
    ToolStarted,
    TurnError,
    TurnEvent,
    TurnFinished,
    TurnText,
)
from app.agent.loop import run_turn
from app.db.store import Store
from app.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderError,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from app.providers.pricing import Cost
from app.providers.usage import Usage
from app.tools.registry import Tool, ToolContext, ToolError
from tests.support.agent import Agent, agent_settings, timeless
from tests.support.scripted import Scripted, ScriptedProvider, calls, reply

LOOKUP_SPEC = ToolSpec(
    "lookup",
    "Look a thing up.",
    {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
)


ARGS = json.dumps({"what": "box"})


class Lookups:
    """The `lookup` tool, recording each call it gets; `missing` names what it cannot find."""

    def __init__(self, missing: str = "") -> None:
        self.calls: list[str] = []
        self.missing = missing

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(args["what"])
        if args["what"] == self.missing:
            raise ToolError(f"nothing is called {self.missing}")
        return f"found {args['what']}"

    def tool(self) -> Tool:
        return Tool(LOOKUP_SPEC.name, LOOKUP_SPEC.description, LOOKUP_SPEC.parameters, self)


async def _run(agent: Agent, text: str) -> tuple[TurnFinished, list[TurnEvent], str]:
    handle, opened = await agent.open(text)
    finished = await run_turn(opened.context)
    return finished, timeless(handle.history()), opened.context.session_id


def _sent(provider: ScriptedProvider, session_id: str) -> list[ModelRequest]:
    """The requests without their system prompt, after checking it is one prompt, unmoved."""
    prompts = {request.system for request in provider.requests}
    assert len(prompts) == 1, "the system prompt moved between calls of one turn"
    assert all(request.prompt_cache_key == session_id for request in provider.requests)
    return [replace(request, system=()) for request in provider.requests]


def _request(*messages: Any, session_id: str, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest(
        model="gpt-4o-mini",
        system=(),
        messages=messages,
        tools=tools,
        prompt_cache_key=session_id,
    )


def _finished(
    reason: ExitReason,
    *,
    calls: int,
    tools_ran: int = 0,
    usage: Usage | None = None,
    error: TurnError | None = None,
) -> TurnFinished:
    """The outcome a turn of `calls` upstream calls (each the scripted USAGE) reports."""
    return TurnFinished(
        exit_reason=reason,
        finish_reason="stop",
        usage=Usage(input_tokens=100 * calls, output_tokens=10 * calls) if usage is None else usage,
        cost=Cost.zero(),
        upstream_calls=calls,
        iterations=calls,
        error=error,
        tools_ran=tools_ran,
    )


def _priced(finished: TurnFinished) -> TurnFinished:
    """The outcome with its cost set aside (the price table's figures are not under test
    here), after checking the upstream's usage was priced at all."""
    assert finished.cost.status == "estimated" and finished.cost.amount > 0
    return replace(finished, cost=Cost.zero())


def _stored(db_path: Path, session_id: str) -> list[tuple[Any, ...]]:
    """What another connection sees committed: (role, content, tool_calls, call id)."""
    with sqlite3.connect(db_path) as db:
        return db.execute(
            "SELECT role, content, tool_calls, tool_call_id FROM message "
            "WHERE session_id = ? AND active ORDER BY id",
            (session_id,),
        ).fetchall()


async def test_a_text_turn(store: Store, tmp_path: Path, scripted: Scripted) -> None:
    provider = scripted(reply("Hello there."))
    agent = Agent(store, agent_settings(tmp_path), provider)
    finished, events, sid = await _run(agent, "hi")
    assert _priced(finished) == _finished("completed", calls=1)
    assert events == [TurnText("Hello there.")]  # the manager, not the loop, publishes the end
    assert _sent(provider, sid) == [_request(UserMessage("hi", cache=True), session_id=sid)]


async def test_a_tool_turn_sends_the_result_back(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    lookups = Lookups()
    provider = scripted(
        calls(("c1", "lookup", {"what": "box"}), text="Let me look."), reply("It is a box.")
    )
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[lookups.tool()])
    finished, events, sid = await _run(agent, "what is it?")
    assert lookups.calls == ["box"]
    assert _priced(finished) == _finished("completed", calls=2, tools_ran=1)
    assert events == [
        TurnText("Let me look."),
        ToolStarted("c1", "lookup"),
        ToolFinished("c1", "lookup", is_error=False),
        TurnText("\n\n"),  # a later iteration's text reads as a new paragraph
        TurnText("It is a box."),
    ]
    asked = UserMessage("what is it?", cache=True)
    call = ToolCall("c1", "lookup", ARGS)
    assert _sent(provider, sid) == [
        _request(asked, session_id=sid, tools=(LOOKUP_SPEC,)),
        _request(
            asked,
            AssistantMessage("Let me look.", (call,)),
            ToolResultMessage("c1", "lookup", "found box", cache=True),
            session_id=sid,
            tools=(LOOKUP_SPEC,),
        ),
    ]


async def test_a_tool_error_is_a_result_the_model_reads(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    lookups = Lookups(missing="unicorn")
    provider = scripted(calls(("c1", "lookup", {"what": "unicorn"})), reply("There is no unicorn."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[lookups.tool()])
    finished, events, sid = await _run(agent, "find the unicorn")
    assert _priced(finished) == _finished("completed", calls=2, tools_ran=1)
    assert events == [
        ToolStarted("c1", "lookup"),
        ToolFinished("c1", "lookup", is_error=True),
        TurnText("There is no unicorn."),
    ]
    result = _sent(provider, sid)[1].messages[-1]
    assert result == ToolResultMessage(
        "c1", "lookup", "error: nothing is called unicorn", is_error=True, cache=True
    )


async def test_a_call_to_a_tool_the_session_lacks_is_refused_not_run(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    """The model's mistake: a tool outside the session's snapshot gets an error result."""
    lookups = Lookups()
    provider = scripted(calls(("c1", "delete_everything", {})), reply("I cannot do that."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[lookups.tool()])
    finished, _, sid = await _run(agent, "clean up")
    assert finished.exit_reason == "completed" and lookups.calls == []
    result = _sent(provider, sid)[1].messages[-1]
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert result.tool_call_id == "c1" and "delete_everything" in result.content


async def test_an_upstream_failure_ends_the_turn_with_its_kind(
    store: Store, tmp_path: Path, scripted: Scripted
) -> None:
    refused = ProviderError("bad_request", "no such model", status=400)
    provider = scripted((refused,))
    agent = Agent(store, agent_settings(tmp_path), provider)
    finished, events, _ = await _run(agent, "hi")
    error = TurnError(
        message="upstream model call failed (bad_request)",
        type="upstream_error",
        code="upstream_bad_request",
    )
    expected = _finished("upstream_error", calls=1, usage=Usage(), error=error)
    assert replace(finished, cost=Cost.zero()) == expected
    assert events == []


async def test_the_call_is_committed_before_its_tool_runs(
    store: Store, db_path: Path, tmp_path: Path, scripted: Scripted
) -> None:
    """Persist before act: when the tool starts, the assistant message that asked for it is
    already committed (another connection sees it), so a crash mid-tool leaves a call the
    next turn can close, never a tool that ran for nothing anyone recorded."""
    seen_at_start: list[list[tuple[Any, ...]]] = []
    session: list[str] = []

    async def look(args: dict[str, Any], ctx: ToolContext) -> str:
        seen_at_start.append(await asyncio.to_thread(_stored, db_path, session[0]))
        return "found box"

    tool = Tool(LOOKUP_SPEC.name, LOOKUP_SPEC.description, LOOKUP_SPEC.parameters, look)
    provider = scripted(calls(("c1", "lookup", {"what": "box"})), reply("A box."))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[tool])
    _, opened = await agent.open("what is it?")
    session.append(opened.context.session_id)
    finished = await run_turn(opened.context)
    assert finished.exit_reason == "completed"
    assert seen_at_start == [
        [
            ("user", "what is it?", None, None),
            (
                "assistant",
                None,
                '[{"id": "c1", "name": "lookup", "arguments": "{\\"what\\": \\"box\\"}"}]',
                None,
            ),
        ]
    ]


async def test_a_store_that_fails_the_calls_write_runs_no_tool(
    store: Store, db_path: Path, tmp_path: Path, scripted: Scripted
) -> None:
    """The same ordering, from the other side: the database refuses the assistant message
    with the calls, so the turn ends `persistence_failed` and the tool never starts."""
    lookups = Lookups()
    provider = scripted(calls(("c1", "lookup", {"what": "box"})))
    agent = Agent(store, agent_settings(tmp_path), provider, tools=[lookups.tool()])
    handle, opened = await agent.open("what is it?")
    with sqlite3.connect(db_path) as db:
        db.execute(
            "CREATE TRIGGER refuse_calls BEFORE INSERT ON message "
            "WHEN NEW.role = 'assistant' AND NEW.tool_calls IS NOT NULL "
            "BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
    finished = await run_turn(opened.context)
    assert (finished.exit_reason, finished.tools_ran) == ("persistence_failed", 0)
    assert finished.error is not None and finished.error.code == "persistence_failed"
    assert lookups.calls == []
    assert timeless(handle.history()) == []  # no ToolStarted: nothing ran
    assert _stored(db_path, opened.context.session_id) == [("user", "what is it?", None, None)]
