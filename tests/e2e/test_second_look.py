"""Replies that need a second look, over HTTP against the simulator: an empty reply is
nudged once then fails by name, a `length` cut is continued and joined, a tool call cut
mid-arguments is answered with an error the model reads and never runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import Server
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


def _chat(server: Server, text: str, **extra: Any) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}], **extra}
    return httpx.post(f"{server.base_url}{URL}", json=body, headers=server.headers(), timeout=30)


def _stream(server: Server, text: str) -> tuple[str, list[dict[str, Any]]]:
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": text}]}
    chunks: list[dict[str, Any]] = []
    with httpx.stream(
        "POST", f"{server.base_url}{URL}", json=body, headers=server.headers(), timeout=30
    ) as resp:
        assert resp.status_code == 200
        sid = resp.headers["x-session-id"]
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return sid, chunks


def _db(server: Server, query: str, *args: Any) -> list[dict[str, Any]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(query, args)]
    finally:
        con.close()


def _exit_reasons(server: Server, sid: str) -> list[str]:
    rows = _db(server, "SELECT exit_reason FROM turn WHERE session_id = ? ORDER BY rowid", sid)
    return [r["exit_reason"] for r in rows]


def _messages(server: Server, sid: str) -> list[dict[str, Any]]:
    return _db(server, "SELECT * FROM message WHERE session_id = ? ORDER BY id", sid)


def _upstream_bodies(sim: Simulator) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in sim.requests()]


def test_empty_reply_is_nudged_once_and_then_answers(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": None}},
            {"expect": {"last_user_contains": "was empty"}, "reply": {"text": "Hello there."}},
        ]
    )
    resp = _chat(server, "say hi")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Hello there."
    sim.assert_script_done()
    sid = resp.headers["x-session-id"]
    assert _exit_reasons(server, sid) == ["completed"]
    # The nudge rode after the conversation and was never stored.
    assert [(m["role"], m["content"]) for m in _messages(server, sid)] == [
        ("user", "say hi"),
        ("assistant", "Hello there."),
    ]


def test_empty_twice_is_a_named_error_not_a_null_success(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": None}}, {"reply": {"text": "   ", "reasoning": "hmm"}}])
    resp = _chat(server, "anything?")
    assert resp.status_code == 502, resp.text
    error = resp.json()["error"]
    assert error["code"] == "empty_reply" and error["type"] == "upstream_error"
    assert resp.headers["x-should-retry"] == "true"
    sim.assert_script_done()
    assert len(sim.requests()) == 2  # one nudge, no more
    sid = resp.headers["x-session-id"]
    assert _exit_reasons(server, sid) == ["empty_reply"]
    assert [m["role"] for m in _messages(server, sid)] == ["user"]


def test_empty_reply_streamed_ends_with_an_error_event(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": None}}, {"reply": {"text": None}}])
    sid, chunks = _stream(server, "anything?")
    errors = [c["error"] for c in chunks if "error" in c]
    assert [e["code"] for e in errors] == ["empty_reply"]
    assert _exit_reasons(server, sid) == ["empty_reply"]


def test_length_cut_is_continued_and_joined(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "The first half, ", "finish_reason": "length"}},
            {
                "expect": {"last_user_contains": "cut off by the output token limit"},
                "reply": {"text": "and the second half."},
            },
            {"expect": {"last_user_contains": "again"}, "reply": {"text": "Sure."}},
        ]
    )
    resp = _chat(server, "tell me")
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["message"]["content"] == "The first half, and the second half."
    assert choice["finish_reason"] == "stop"
    # The continuation request saw the first piece as the assistant's own text.
    continuation = _upstream_bodies(sim)[1]["messages"]
    assert [m["role"] for m in continuation[-3:]] == ["user", "assistant", "user"]
    assert continuation[-2]["content"] == "The first half, "
    sid = resp.headers["x-session-id"]
    assert _exit_reasons(server, sid) == ["completed"]
    # One joined assistant row: the next request replays the answer, not the pieces.
    follow = httpx.post(
        f"{server.base_url}{URL}",
        json={"model": "courier", "messages": [{"role": "user", "content": "again"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
        timeout=30,
    )
    assert follow.status_code == 200, follow.text
    sim.assert_script_done()
    replayed = _upstream_bodies(sim)[2]["messages"]
    shape = [(m["role"], m["content"]) for m in replayed if m["role"] != "system"]
    assert shape == [
        ("user", "tell me"),
        ("assistant", "The first half, and the second half."),
        ("user", "again"),
    ]


def test_streamed_continuation_reads_as_one_text(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "one ", "finish_reason": "length"}},
            {"reply": {"text": "two", "finish_reason": "stop"}},
        ]
    )
    sid, chunks = _stream(server, "count")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "one two"  # no paragraph break between the pieces
    assert _exit_reasons(server, sid) == ["completed"]


def test_continuations_stop_at_the_profile_limit(server: Server, sim: Simulator) -> None:
    # The default profile allows two continuations: three cut pieces, then `truncated`.
    sim.script([{"reply": {"text": f"p{i} ", "finish_reason": "length"}} for i in range(3)])
    resp = _chat(server, "go on forever")
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["message"]["content"] == "p0 p1 p2 "
    assert choice["finish_reason"] == "length"
    sim.assert_script_done()
    assert len(sim.requests()) == 3
    assert _exit_reasons(server, resp.headers["x-session-id"]) == ["truncated"]


def test_tool_call_cut_mid_arguments_is_closed_not_run(
    server: Server, sim: Simulator, tmp_path: Path
) -> None:
    cut = '{"path": "cut.txt", "content": "def f():\\n    ret'
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [{"name": "write_file", "arguments": cut, "id": "call_cut"}],
                    "finish_reason": "length",
                }
            },
            {
                "expect": {"last_tool_result_contains": "cut off by the output token limit"},
                "reply": {"text": "I will write it in smaller parts."},
            },
        ]
    )
    resp = _chat(server, "write the file")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "I will write it in smaller parts."
    sim.assert_script_done()
    sid = resp.headers["x-session-id"]
    rows = _messages(server, sid)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2]["tool_call_id"] == "call_cut" and rows[2]["is_error"]
    assert not list(server.data_dir.rglob("cut.txt"))  # the tool never ran
    assert _exit_reasons(server, sid) == ["completed"]
