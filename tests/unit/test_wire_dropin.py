"""Pure tests of how each wire renders the drop-in request features: instructions,
greetings, images, tool_choice, parallel calls, structured output and sampling fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.agent.opening.continuity import chain, scope_seed
from app.agent.structured import output_problem, schema_problem
from app.agent.turn_request import VisibleMessage
from app.providers.anthropic import GREETING_CUE, INSTRUCTION_PREFIX, build_messages_body
from app.providers.base import (
    AssistantMessage,
    Image,
    ModelRequest,
    OutputFormat,
    SamplingParams,
    ToolSpec,
    UserMessage,
)
from app.providers.openai_chat import build_chat_body

TOOL = ToolSpec(name="end_call", description="", parameters={"type": "object"})
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _request(**kw: Any) -> ModelRequest:
    base: dict[str, Any] = {"model": "m", "system": (), "messages": (UserMessage("hi"),)}
    return ModelRequest(**{**base, **kw})


def test_instructions_are_system_messages_on_openai_and_labelled_text_on_anthropic() -> None:
    messages = (
        UserMessage("hi"),
        AssistantMessage("hello"),
        UserMessage("wrap up", instruction=True),
    )
    openai = build_chat_body(_request(messages=messages))["messages"]
    assert openai[-1] == {"role": "system", "content": "wrap up"}
    anthropic = build_messages_body(_request(messages=messages))["messages"]
    assert anthropic[-1] == {
        "role": "user",
        "content": [{"type": "text", "text": INSTRUCTION_PREFIX + "wrap up"}],
    }


def test_a_greeting_gets_a_first_user_turn_only_where_the_wire_needs_one() -> None:
    assert build_chat_body(_request(messages=()))["messages"] == []
    turns = build_messages_body(_request(messages=(AssistantMessage("Hi!"),)))["messages"]
    assert turns[0] == {"role": "user", "content": [{"type": "text", "text": GREETING_CUE}]}
    assert turns[1]["role"] == "assistant"


def test_images_on_both_wires() -> None:
    image = Image(media_type="image/png", data="AAAA")
    linked = Image(url="https://example.test/cat.png")
    msg = UserMessage("what?", images=(image, linked))
    openai = build_chat_body(_request(messages=(msg,)))["messages"][0]["content"]
    assert openai == [
        {"type": "text", "text": "what?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}},
    ]
    blocks = build_messages_body(_request(messages=(msg,)))["messages"][0]["content"]
    assert blocks[0]["source"] == {"type": "base64", "media_type": "image/png", "data": "AAAA"}
    assert blocks[1]["source"] == {"type": "url", "url": "https://example.test/cat.png"}
    assert blocks[2] == {"type": "text", "text": "what?"}


@pytest.mark.parametrize(
    ("choice", "parallel", "openai", "anthropic"),
    [
        ("auto", None, None, None),
        ("auto", False, None, {"type": "auto", "disable_parallel_tool_use": True}),
        ("none", None, "none", {"type": "none"}),
        ("required", None, "required", {"type": "any"}),
        (
            "end_call",
            None,
            {"type": "function", "function": {"name": "end_call"}},
            {"type": "tool", "name": "end_call"},
        ),
    ],
)
def test_tool_choice_on_both_wires(
    choice: str, parallel: bool | None, openai: Any, anthropic: Any
) -> None:
    request = _request(tools=(TOOL,), tool_choice=choice, parallel_tool_calls=parallel)
    body = build_chat_body(request)
    assert body.get("tool_choice") == openai
    assert body.get("parallel_tool_calls") == parallel
    assert build_messages_body(request).get("tool_choice") == anthropic


def test_structured_output_and_sampling_fields() -> None:
    fmt = OutputFormat("json_schema", SCHEMA, "answer", strict=True)
    sampling = SamplingParams(seed=3, presence_penalty=0.5, reasoning_effort="minimal", user="u")
    request = _request(output_format=fmt, sampling=sampling)
    body = build_chat_body(request)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True},
    }
    assert (body["seed"], body["presence_penalty"], body["user"]) == (3, 0.5, "u")
    messages = build_messages_body(request)
    assert messages["output_config"] == {
        "format": {"type": "json_schema", "schema": SCHEMA},
        "effort": "low",
    }
    assert messages["metadata"] == {"user_id": "u"} and "seed" not in messages


def test_output_problems_name_where_the_answer_is_wrong() -> None:
    fmt = OutputFormat("json_schema", SCHEMA)
    assert output_problem(fmt, '{"n": 2}') is None
    assert "not valid JSON" in (output_problem(fmt, "n is 2") or "")
    assert "at n" in (output_problem(fmt, '{"n": "two"}') or "")
    assert output_problem(OutputFormat("json_object"), "[1]") == "the answer must be a JSON object"
    assert schema_problem({"type": "objekt"}) is not None
    assert schema_problem(SCHEMA) is None


def test_continuity_chain_is_scoped_and_prefix_stable() -> None:
    a = scope_seed(owner="k", profile="p", end_user="alice")
    b = scope_seed(owner="k", profile="p", end_user="bob")
    msgs = [VisibleMessage("user", "hi"), VisibleMessage("assistant", "hello")]
    assert chain(a, msgs)[0] == chain(a, msgs[:1])[0]
    assert chain(a, msgs)[0] != chain(b, msgs)[0]
    # Clients re-serialise tool arguments: the value matters, not the bytes.
    one = VisibleMessage("assistant", "", calls=(("c1", "f", '{"a": 1, "b": 2}'),))
    two = VisibleMessage("assistant", "", calls=(("c1", "f", '{"b":2,"a":1}'),))
    assert chain(a, [one]) == chain(a, [two])


def test_the_continuity_lookup_is_an_index_search(tmp_path: Path) -> None:
    """O(1) in the number of sessions: the query plan searches the prefix-hash index and
    never scans the table (counted in the plan, not timed)."""
    from sqlalchemy import text

    from app.db.chat_store import _FIND
    from app.db.store import Store

    store = Store.open(tmp_path / "plan.db")
    try:
        with store.engine.connect() as conn:
            compiled = str(_FIND.compile(compile_kwargs={"literal_binds": True}))
            plan = [
                str(row[-1])
                for row in conn.execute(
                    text(
                        "EXPLAIN QUERY PLAN "
                        + compiled.replace("IN ([EXPANDING_hashes])", "IN ('a', 'b')")
                    )
                )
            ]
    finally:
        store.close()
    assert any("USING INDEX" in step and "prefix_hash" in step for step in plan), plan
    assert not any(step.startswith("SCAN") for step in plan), plan
