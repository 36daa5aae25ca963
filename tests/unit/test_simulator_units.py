"""The simulator's pure parts, without HTTP: counting, prefix hashing, caching, limits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.simulator import anthropic_wire, openai_wire
from app.simulator.cache import PromptCache, anthropic_usage, openai_usage
from app.simulator.config import ConfigError, SimulatorConfig
from app.simulator.output import argument_pieces, build_output, text_pieces
from app.simulator.policy import demo_reply
from app.simulator.request import Breakpoint, SimError
from app.simulator.script import Reply, ScriptError, ToolCallSpec, parse_script
from app.simulator.token_count import Segment, count_tokens, segment_digests, token_digests


def test_count_tokens_rule() -> None:
    assert [count_tokens(t) for t in ("", "a", "abcd", "abcde", "é" * 2)] == [0, 1, 1, 2, 1]


def test_token_digests_agree_with_segment_digests() -> None:
    segments = [Segment("h1", "a" * 40), Segment("h2", ""), Segment("h3", "b" * 21)]
    full = segment_digests("ns", segments)
    cut = token_digests("ns", segments, [5, 10, 16])
    assert cut[10] == full[0]  # the end of a segment is the same prefix either way
    assert cut[16] == full[2]
    assert cut[5] not in full
    assert token_digests("other", segments, [10])[10] != cut[10]


def test_partial_prefix_matches_only_equal_bytes() -> None:
    one = [Segment("h", "x" * 400 + "tail one")]
    two = [Segment("h", "x" * 400 + "tail two"), Segment("h", "more")]
    assert token_digests("n", one, [100]) == token_digests("n", two, [100])
    assert token_digests("n", one, [102]) != token_digests("n", two, [102])


def _segments(*sizes: int) -> list[Segment]:
    return [Segment(json.dumps({"i": i}), "z" * (4 * size)) for i, size in enumerate(sizes)]


def test_anthropic_breakpoints_read_write_and_ttl_split() -> None:
    cache = PromptCache()
    segments = _segments(2000, 500, 700, 9)
    marks = [Breakpoint(0, 3600.0), Breakpoint(2, 300.0)]
    first = anthropic_usage(
        cache, 0.0, namespace="n", segments=segments, breakpoints=marks, min_tokens=1024
    )
    assert (first.cache_write_1h, first.cache_write_5m, first.fresh_input) == (2000, 1200, 9)
    later = anthropic_usage(
        cache, 400.0, namespace="n", segments=segments, breakpoints=marks, min_tokens=1024
    )
    # The 5m entry expired, the 1h one did not: read up to it, rewrite the rest.
    assert (later.cache_read, later.cache_write_5m, later.fresh_input) == (2000, 1200, 9)


def test_anthropic_prefix_below_minimum_is_not_cached() -> None:
    cache = PromptCache()
    segments = _segments(1000, 10)
    usage = anthropic_usage(
        cache,
        0,
        namespace="n",
        segments=segments,
        breakpoints=[Breakpoint(0, 300)],
        min_tokens=1024,
    )
    assert (usage.cache_write, usage.fresh_input) == (0, 1010) and len(cache) == 0


def test_openai_grid_prefixes() -> None:
    cache = PromptCache()
    segments = _segments(1300)

    def cached(now: float) -> int:
        usage = openai_usage(cache, now, namespace="n", segments=segments, min_tokens=1024, ttl=300)
        return usage.cache_read

    assert (cached(0), cached(1), cached(302)) == (0, 1280, 0)


def test_output_limits() -> None:
    calls = (ToolCallSpec("a", '{"x":"' + "y" * 40 + '"}'), ToolCallSpec("b", "{}"))
    reply = Reply(text="four", tool_calls=calls)
    out = build_output(reply, max_tokens=6, stop=(), id_prefix="call", step=3)
    assert out.finish == "length"
    assert [(c.id, c.arguments) for c in out.tool_calls] == [("call_3_0", '{"x":"yyyyyyyyyyyyyy')]
    assert out.output_tokens == 6
    stopped = build_output(reply, max_tokens=None, stop=("ur",), id_prefix="toolu", step=1)
    assert (stopped.text, stopped.tool_calls, stopped.finish) == ("fo", (), "stop_sequence")
    forced = build_output(
        Reply(text="x", finish_reason="length"), max_tokens=None, stop=(), id_prefix="c", step=1
    )
    assert forced.finish == "length"


def test_pieces_rejoin() -> None:
    text = "  Hello,   world!\nNew line "
    assert "".join(text_pieces(text)) == text and len(text_pieces(text)) == 4
    args = json.dumps({"path": "some/long/path/name.txt"})
    assert "".join(argument_pieces(args)) == args


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ({"steps": "x"}, "list of steps"),
        ([{"reply": {"tool_calls": [{"arguments": {}}]}}], r"tool_calls\[0\]\.name"),
        ([{"expect": {"has_tools": "yes"}}], "has_tools has the wrong type"),
        ([{"fault": {"status": 200}}], "HTTP error status"),
        ([{"replay": {}}], "unknown keys"),
    ],
)
def test_script_validation(script: Any, error: str) -> None:
    with pytest.raises(ScriptError, match=error):
        parse_script(script)


def test_script_arguments_serialized_compactly() -> None:
    (step,) = parse_script(
        {"steps": [{"reply": {"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}}]}
    )
    assert step.reply.tool_calls[0].arguments == '{"a":1}'


def test_config_updates_are_checked() -> None:
    config = SimulatorConfig().updated({"ttft_ms": 50, "context_window": 1000})
    assert (config.ttft_ms, config.context_window) == (50.0, 1000)
    for bad in (
        {"context_windw": 1},
        {"context_window": 1.5},
        {"ttft_ms": True},
        {"required_key": ""},
    ):
        with pytest.raises(ConfigError):
            SimulatorConfig().updated(bad)


def test_openai_history_facts() -> None:
    request = openai_wire.parse(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be terse."},
                {"role": "user", "content": [{"type": "text", "text": "read a.py"}]},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                        },
                        {
                            "id": "2",
                            "type": "function",
                            "function": {"name": "list_files", "arguments": "{}"},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "1", "content": "print(1)"},
                {"role": "tool", "tool_call_id": "2", "content": "a.py"},
            ],
            "tools": [{"type": "function", "function": {"name": "read_file"}}],
            "max_tokens": 10,
            "stop": "END",
        }
    )
    assert (request.system_text, request.last_user_text, request.last_role) == (
        "Be terse.",
        "read a.py",
        "tool",
    )
    assert [(r.tool_name, r.content) for r in request.last_tool_results] == [
        ("read_file", "print(1)"),
        ("list_files", "a.py"),
    ]
    assert (request.max_tokens, request.stop, request.tool_names) == (10, ("END",), ("read_file",))
    reply = demo_reply(request)
    assert reply.text == 'The file a.py begins: "print(1)" The workspace contains: a.py.'


def test_anthropic_parse_breakpoints_and_errors() -> None:
    marked = {"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    request = anthropic_wire.parse(
        {
            "model": "c",
            "max_tokens": 5,
            "tools": [{"name": "t", "input_schema": {}, "cache_control": {"type": "ephemeral"}}],
            "system": [marked],
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    assert request.breakpoints == (Breakpoint(0, 300.0), Breakpoint(1, 3600.0))
    with pytest.raises(Exception, match="max_tokens: Field required"):
        anthropic_wire.parse({"model": "c", "messages": []})


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ("What is in the workspace?", [("list_files", ".")]),
        (
            "Please read docs/intro.md and notes.txt",
            [("read_file", "docs/intro.md"), ("read_file", "notes.txt")],
        ),
        ("Version 3.14 is out, e.g. today", []),
    ],
)
def test_demo_tool_choice(text: str, calls: list[tuple[str, str]]) -> None:
    request = anthropic_wire.parse(
        {
            "model": "c",
            "max_tokens": 5,
            "tools": [
                {"name": "list_files", "input_schema": {}},
                {"name": "read_file", "input_schema": {}},
            ],
            "messages": [{"role": "user", "content": text}],
        }
    )
    reply = demo_reply(request)
    assert [(c.name, json.loads(c.arguments)["path"]) for c in reply.tool_calls] == calls
    if not calls:
        assert reply.text is not None and reply.text.startswith("You asked:")


def _call(call_id: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        (
            [{"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]}],
            "did not have response messages: a, b",
        ),
        (
            [
                {"role": "assistant", "content": None, "tool_calls": [_call("a")]},
                {"role": "user", "content": "next"},
            ],
            "did not have response messages: a",
        ),
        ([{"role": "tool", "tool_call_id": "x", "content": "?"}], "must be a response to"),
    ],
)
def test_openai_rejects_unpaired_tool_messages(messages: list[Any], error: str) -> None:
    with pytest.raises(SimError, match=error):
        openai_wire.parse({"model": "m", "messages": [{"role": "user", "content": "q"}, *messages]})


def test_anthropic_rejects_unpaired_tool_blocks() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t2", "content": "r"}
    body: dict[str, Any] = {"model": "c", "max_tokens": 5, "tools": [{"name": "f"}]}
    ask = {"role": "user", "content": "q"}
    turn = {"role": "assistant", "content": [use]}
    with pytest.raises(SimError, match="without `tool_result` blocks immediately after: t1"):
        anthropic_wire.parse({**body, "messages": [ask, turn, ask]})
    with pytest.raises(SimError, match="unexpected `tool_use_id`"):
        anthropic_wire.parse({**body, "messages": [{"role": "user", "content": [result]}]})
    answered = {"role": "user", "content": [{**result, "tool_use_id": "t1"}]}
    anthropic_wire.parse({**body, "messages": [ask, turn, answered]})
    with pytest.raises(SimError, match="must define tools"):
        anthropic_wire.parse({**body, "tools": [], "messages": [ask, turn, answered]})
