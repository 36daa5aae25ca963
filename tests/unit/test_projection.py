"""Projection is pure and always yields a transcript providers accept."""

from __future__ import annotations

from app.agent.accumulate import ReplyBuilder
from app.agent.context.projection import INTERRUPTED_RESULT, project
from app.db.store import StoredMessage
from app.providers.base import (
    AssistantMessage,
    Finish,
    TextDelta,
    ToolCallDelta,
    ToolResultMessage,
    UsageEvent,
    UserMessage,
)
from app.providers.usage import Usage


def _row(i: int, role: str, content: str | None = None, **kw: object) -> StoredMessage:
    return StoredMessage(
        id=i,
        role=role,
        content=content,
        api_content=kw.get("api_content"),  # type: ignore[arg-type]
        tool_calls=tuple(kw.get("tool_calls", ())),  # type: ignore[arg-type]
        tool_call_id=kw.get("tool_call_id"),  # type: ignore[arg-type]
        tool_name=kw.get("tool_name"),  # type: ignore[arg-type]
        is_error=False,
        turn_id=None,
    )


CALL = {"id": "c1", "name": "read_file", "arguments": "{}"}


def test_api_content_is_replayed_verbatim() -> None:
    rows = [_row(1, "user", "display", api_content="exact bytes")]
    assert project(rows) == (UserMessage("exact bytes"),)


def test_open_call_is_closed_before_the_next_user_turn() -> None:
    rows = [
        _row(1, "user", "a"),
        _row(2, "assistant", None, tool_calls=[CALL]),
        _row(3, "user", "b"),
    ]
    out = project(rows)
    assert [m.kind for m in out] == ["user", "assistant", "tool", "user"]
    result = out[2]
    assert isinstance(result, ToolResultMessage) and result.content == INTERRUPTED_RESULT


def test_orphan_and_duplicate_results_are_dropped() -> None:
    rows = [
        _row(1, "user", "a"),
        _row(2, "tool", "orphan", tool_call_id="zz"),
        _row(3, "assistant", None, tool_calls=[CALL]),
        _row(4, "tool", "first", tool_call_id="c1"),
        _row(5, "tool", "again", tool_call_id="c1"),
    ]
    out = project(rows)
    assert [m.kind for m in out] == ["user", "assistant", "tool"]
    assert isinstance(out[2], ToolResultMessage) and out[2].content == "first"


def test_projection_is_deterministic() -> None:
    rows = [_row(1, "user", "a"), _row(2, "assistant", "b")]
    assert project(rows) == project(list(rows))
    assert project(rows)[1] == AssistantMessage("b")


def test_accumulator_folds_fragments() -> None:
    building = ReplyBuilder()
    for event in [
        TextDelta("Hel"),
        TextDelta("lo"),
        ToolCallDelta(index=1, id="b", name="list_files", arguments=""),
        ToolCallDelta(index=0, id="a", name="read_file", arguments='{"pa'),
        ToolCallDelta(index=0, arguments='th": "x"}'),
        UsageEvent(Usage(input_tokens=3, output_tokens=4)),
        Finish("tool_calls"),
    ]:
        building.add(event)
    reply = building.reply()
    assert reply.text == "Hello"
    assert reply.events == 7
    calls = reply.tool_calls("fallback")
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("a", "read_file", '{"path": "x"}'),
        ("b", "list_files", ""),
    ]
    assert reply.usage == Usage(input_tokens=3, output_tokens=4)
    assert reply.finish == "tool_calls"


def test_a_snapshot_is_a_value_the_stream_does_not_change() -> None:
    building = ReplyBuilder()
    building.add(TextDelta("Hel"))
    building.add(ToolCallDelta(index=0, id="a", name="read_file", arguments='{"pa'))
    early = building.reply()
    building.add(TextDelta("lo"))
    building.add(ToolCallDelta(index=0, arguments='th": "x"}'))
    assert (early.text, early.tool_calls("x")[0].arguments, early.events) == ("Hel", '{"pa', 2)
    assert building.reply().text == "Hello"
    assert building.reply().tool_calls("x")[0].arguments == '{"path": "x"}'


def test_call_without_id_gets_a_stable_one() -> None:
    building = ReplyBuilder()
    building.add(ToolCallDelta(index=0, name="list_files"))
    reply = building.reply()
    assert reply.tool_calls("call_t_1")[0].id == "call_t_1_0"
