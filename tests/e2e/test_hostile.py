"""Hostile clients over real HTTP: races, disconnects, malformed bodies, stolen ids, traversal.

One server for the module, with the WAIT test tool, a workspace the tests control, and an
admin and a metrics key besides the main one. Nothing here asserts on timing: a race is
set up by waiting for state (the WAIT tool's marker file, rows in the SQLite log), never
by sleeping for a guessed duration.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import API_KEY, Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"
ADMIN_KEY = "admin-key-9f8e7d6c5b4a3210"
METRICS_KEY = "metrics-key-1a2b3c4d5e6f7081"
GOOD: dict[str, Any] = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}
SECRET = "TOPSECRET-7d1c0a5e-outside-the-workspace"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    workspace = root / "ws"
    outside = root / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    trap = workspace / "trap"
    trap.mkdir()
    (trap / "link").symlink_to(outside / "secret.txt")
    (trap / "dirlink").symlink_to(outside, target_is_directory=True)
    return {"root": root, "workspace": workspace, "outside": outside, "data": root / "data"}


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, dirs: dict[str, Path]) -> Server:
    return module_servers(
        data_dir=dirs["data"],
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_WORKSPACE=str(dirs["workspace"]),
        COURIER_ADMIN_API_KEY=ADMIN_KEY,
        COURIER_METRICS_API_KEY=METRICS_KEY,
    )


@pytest.fixture
def marker(dirs: dict[str, Path]) -> Path:
    """The WAIT tool's marker file, removed so this test sees only its own call start."""
    path = dirs["workspace"] / "wait-started"
    path.unlink(missing_ok=True)
    return path


# --------------------------------------------------------------------------- helpers


def _post(
    server: Server,
    body: Any,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 30,
) -> httpx.Response:
    hdrs = server.headers() if headers is None else headers
    kwargs: dict[str, Any] = {"content": body} if isinstance(body, (bytes, str)) else {"json": body}
    return httpx.post(f"{server.base_url}{URL}", headers=hdrs, timeout=timeout, **kwargs)


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:2000]
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


def _healthy(server: Server) -> None:
    assert server.proc is not None and server.proc.poll() is None, server.log()[-3000:]
    resp = httpx.get(f"{server.base_url}/health", timeout=10)
    assert resp.status_code == 200 and resp.json() == {"status": "ok"}


def _db(server: Server) -> Path:
    return server.data_dir / "courier.db"


def _query(server: Server, sql: str, *args: Any) -> list[dict[str, Any]]:
    con = sqlite3.connect(_db(server), timeout=10)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(sql, args)]
    finally:
        con.close()


def _messages(server: Server, sid: str) -> list[dict[str, Any]]:
    return _query(server, "SELECT * FROM message WHERE session_id = ? ORDER BY id", sid)


def _turns(server: Server, sid: str) -> list[dict[str, Any]]:
    return _query(server, "SELECT * FROM turn WHERE session_id = ? ORDER BY started_at", sid)


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"not reached in {timeout}s: {what}")


def _upstream(sim: Simulator) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in sim.requests() if r["path"].endswith("/completions")]


def _convo(body: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(m["role"], m.get("tool_call_id")) for m in body["messages"] if m["role"] != "system"]


def _sse_payloads(lines: list[str]) -> list[str]:
    return [line[len("data:") :].strip() for line in lines if line.startswith("data:")]


def _text_of(payloads: list[str]) -> str:
    chunks = [json.loads(p) for p in payloads if p != "[DONE]"]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _raw_status(server: Server, authorization: bytes) -> int:
    """GET /v1/models with exactly these header bytes (httpx refuses some of them)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(
            b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: "
            + authorization
            + b"\r\nConnection: close\r\n\r\n"
        )
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    status_line = data.split(b"\r\n", 1)[0].split()
    assert len(status_line) >= 2, data
    return int(status_line[1])


# ------------------------------------------------------------- 1. concurrent turns


def test_second_turn_on_a_busy_session_is_409(server: Server, sim: Simulator, marker: Path) -> None:
    sim.script(
        [
            {
                "reply": {
                    "text": "Waiting first.",
                    "tool_calls": [{"name": "wait", "arguments": {"seconds": 5}, "id": "call_w"}],
                }
            },
            {"expect": {"last_tool_result_contains": "waited"}, "reply": {"text": "All done."}},
        ]
    )
    first: dict[str, Any] = {}

    def run_first() -> None:
        with httpx.stream(
            "POST",
            f"{server.base_url}{URL}",
            json={**GOOD, "stream": True, "messages": [{"role": "user", "content": "wait"}]},
            headers=server.headers(),
            timeout=60,
        ) as resp:
            first["status"] = resp.status_code
            first["sid"] = resp.headers.get("x-session-id")
            first["lines"] = list(resp.iter_lines())

    worker = threading.Thread(target=run_first, daemon=True)
    worker.start()
    _wait_for(lambda: marker.exists() and "sid" in first, "the WAIT tool started")
    sid = first["sid"]
    assert sid and sid.startswith("sess_")

    # The first turn is inside its tool call and holds the lease: both forms are refused.
    intruder = {"model": "courier", "messages": [{"role": "user", "content": "intruder one"}]}
    reject = {"X-Courier-Busy": "reject"}  # the default profile would enqueue it
    busy = _error(
        _post(server, intruder, headers=server.headers(**{"X-Session-Id": sid, **reject})), 409
    )
    assert busy["code"] == "session_busy"
    busy_stream = _post(
        server,
        {**intruder, "stream": True, "session_id": sid},
        headers=server.headers(**reject),
    )
    assert busy_stream.headers["content-type"].startswith("application/json")
    assert _error(busy_stream, 409)["code"] == "session_busy"

    worker.join(60)
    assert not worker.is_alive(), "the first turn never finished"
    assert first["status"] == 200
    payloads = _sse_payloads(first["lines"])
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all("error" not in c for c in chunks), chunks
    assert _text_of(payloads) == "Waiting first.\n\nAll done."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    sim.assert_script_done()
    assert len(_upstream(sim)) == 2  # the refused requests never reached the model

    # The log is exactly the first turn: nothing of the intruders, the tool result in place.
    rows = _messages(server, sid)
    assert [(r["role"], r["tool_call_id"]) for r in rows] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_w"),
        ("assistant", None),
    ]
    assert "waited" in rows[2]["content"]
    assert not any("intruder" in (r["content"] or "") for r in rows)
    assert [t["exit_reason"] for t in _turns(server, sid)] == ["completed"]

    # The lease was released: the session takes a new turn.
    sim.script([{"expect": {"last_user_contains": "next"}, "reply": {"text": "ok"}}])
    again = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "next"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
    )
    assert again.status_code == 200, again.text
    sim.assert_script_done()


# ------------------------------------------------------------- 2. client disconnect


def test_disconnect_mid_stream_cancels_the_turn(
    server: Server, sim: Simulator, marker: Path
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "text": "Let me wait a while.",
                    "tool_calls": [
                        {"name": "wait", "arguments": {"seconds": 120}, "id": "call_long"}
                    ],
                }
            }
        ]
    )
    seen: list[str] = []
    with httpx.stream(
        "POST",
        f"{server.base_url}{URL}",
        json={**GOOD, "stream": True, "messages": [{"role": "user", "content": "wait long"}]},
        headers=server.headers(),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        sid = resp.headers["x-session-id"]
        # Held, so breaking out does not close it: a dropped iterator closes the connection.
        lines = resp.iter_lines()
        for line in lines:
            seen.append(line)
            if _text_of(_sse_payloads(seen)):
                break  # the model's text has started to arrive
        _wait_for(marker.exists, "the WAIT tool started")
        # Leaving the block closes the connection mid-stream, as a voice barge-in does.
    assert "Let me wait a while."[: len(_text_of(_sse_payloads(seen)))] == _text_of(
        _sse_payloads(seen)
    )

    def ended() -> bool:
        turns = _turns(server, sid)
        return bool(turns) and turns[-1]["exit_reason"] is not None

    _wait_for(ended, "the turn was closed after the disconnect", timeout=30)
    turns = _turns(server, sid)
    assert [t["exit_reason"] for t in turns] == ["cancelled"]

    rows = _messages(server, sid)
    assert [(r["role"], r["tool_call_id"]) for r in rows] == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_long"),
    ]
    assert json.loads(rows[1]["tool_calls"])[0]["id"] == "call_long"
    assert "cancelled" in rows[2]["content"]
    assert rows[2]["is_error"]
    assert not rows[2]["content"].startswith("waited")  # the tool really did not finish

    # The session takes a new turn, and what the model sees is a valid transcript.
    sim.script([{"expect": {"last_user_contains": "still there"}, "reply": {"text": "Yes."}}])
    resp2 = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "still there?"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
    )
    assert resp2.status_code == 200, resp2.text
    assert resp2.json()["choices"][0]["message"]["content"] == "Yes."
    sim.assert_script_done()
    upstream = _upstream(sim)[-1]
    assert _convo(upstream) == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_long"),
        ("user", None),
    ]
    assistant = next(m for m in upstream["messages"] if m["role"] == "assistant")
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_long"]
    tool = next(m for m in upstream["messages"] if m["role"] == "tool")
    assert "cancelled" in tool["content"]
    assert [t["exit_reason"] for t in _turns(server, sid)] == ["cancelled", "completed"]


# ------------------------------------------------------------- 3. malformed bodies


def _chat(**over: Any) -> dict[str, Any]:
    return {**GOOD, **over}


def _msg(**fields: Any) -> dict[str, Any]:
    return _chat(messages=[{"role": "user", "content": "x", **fields}])


BAD_BODIES: list[tuple[str, bytes | dict[str, Any], str | None]] = [
    (
        "invalid-utf8",
        b'{"model":"courier","messages":[{"role":"user","content":"\xff\xfe\xc3("}]}',
        None,
    ),
    ("invalid-utf8-key", b'{"mod\x80el":"courier"}', None),
    ("messages-string", _chat(messages="hello"), "messages"),
    ("messages-object", _chat(messages={"role": "user", "content": "x"}), "messages"),
    ("message-not-object", _chat(messages=["hello"]), "messages[0]"),
    ("content-number", _msg(content=42), "messages[0].content"),
    ("content-float", _msg(content=1.5), "messages[0].content"),
    ("content-object", _msg(content={"text": "x"}), "messages[0].content"),
    ("unknown-role", _chat(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
    ("role-missing", _chat(messages=[{"content": "x"}]), "messages[0].role"),
    ("stream-options-string", _chat(stream_options="yes"), "stream_options"),
    ("stream-options-list", _chat(stream_options=[True]), "stream_options"),
    (
        "include-usage-wrong-type",
        _chat(stream=True, stream_options={"include_usage": "maybe"}),
        "stream_options.include_usage",
    ),
    ("max-cost-negative", _chat(max_cost_usd=-1), "max_cost_usd"),
    ("max-cost-string", _chat(max_cost_usd="free"), "max_cost_usd"),
    ("model-very-long", _chat(model="m" * 100_000), "model"),
    ("model-number", _chat(model=7), "model"),
    ("model-empty", _chat(model=""), "model"),
    ("session-id-very-long", _chat(session_id="sess_" + "a" * 10_000), "session_id"),
]


def test_a_hang_up_as_the_calls_arrive_leaves_a_closed_transcript(
    server: Server, sim: Simulator, marker: Path
) -> None:
    """The client leaves while the calls' intent is being committed (off the loop): the
    commit lands first, then the cancellation closes the calls it recorded."""
    call = {"name": "wait", "arguments": {"seconds": 120}, "id": "call_gone"}
    sim.script([{"reply": {"text": "On it.", "tool_calls": [call]}}])
    body = {**GOOD, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream(
        "POST", f"{server.base_url}{URL}", json=body, headers=server.headers(), timeout=30
    ) as resp:
        sid = resp.headers["x-session-id"]
        for line in resp.iter_lines():
            if line.startswith("data:") and _text_of(_sse_payloads([line])):
                break  # the dropped iterator closes the connection at once

    def ended() -> bool:
        turns = _turns(server, sid)
        return bool(turns) and turns[-1]["exit_reason"] is not None

    _wait_for(ended, "the turn was closed after the hang-up", timeout=30)
    assert [t["exit_reason"] for t in _turns(server, sid)] == ["cancelled"]
    rows = _messages(server, sid)
    roles = [(r["role"], r["tool_call_id"]) for r in rows]
    # Either the intent landed (and its call is closed) or nothing of the reply did.
    assert roles in (
        [("user", None), ("assistant", None), ("tool", "call_gone")],
        [("user", None), ("assistant", None)],
        [("user", None)],
    ), roles
    if len(rows) == 3:
        assert rows[2]["is_error"] and "cancelled" in rows[2]["content"]
    if len(rows) == 2:
        assert not rows[1]["tool_calls"] or rows[1]["tool_calls"] == "[]"


@pytest.mark.parametrize(
    ("body", "param"), [(b, p) for _, b, p in BAD_BODIES], ids=[i for i, _, _ in BAD_BODIES]
)
def test_malformed_body_is_400(
    server: Server, sim: Simulator, body: bytes | dict[str, Any], param: str | None
) -> None:
    resp = _post(server, body)
    error = _error(resp, 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert len(resp.content) < 10_000  # an error never echoes a huge input back
    assert _upstream(sim) == []  # nothing reached the model


def _nested(depth: int) -> bytes:
    return b'{"model":"courier","messages":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, _nested(100_000), b'{"x":' * 50_000 + b"1" + b"}" * 50_000],
    ids=["top-level-arrays", "nested-messages", "nested-objects"],
)
def test_deeply_nested_json_is_400(server: Server, body: bytes) -> None:
    error = _error(_post(server, body), 400)
    assert error["type"] == "invalid_request_error"


def test_server_survives_deeply_nested_json(server: Server) -> None:
    for body in (b"[" * 100_000 + b"]" * 100_000, _nested(100_000)):
        resp = _post(server, body)
        assert resp.status_code == 400
        assert set(resp.json()) == {"error"}  # OpenAI-shaped even when it goes wrong
        assert "Traceback" not in resp.text and "RecursionError" not in resp.text
        _healthy(server)
    # An unauthenticated sender cannot even reach the parser.
    _error(_post(server, _nested(100_000), headers={}), 401)
    _healthy(server)


@pytest.mark.parametrize(
    "body",
    [
        # A JSON escape for a lone surrogate: grammatical JSON, but not Unicode text.
        b'{"model":"courier","messages":[{"role":"user","content":"a\\ud800b"}]}',
        # The same code point as raw (CESU-style) bytes: not valid UTF-8 at all.
        b'{"model":"courier","messages":[{"role":"user","content":"a\xed\xa0\x80b"}]}',
        b'{"model":"courier","messages":[{"role":"system","content":"\\udfff"},'
        b'{"role":"user","content":"x"}]}',
    ],
    ids=["escaped-surrogate", "raw-surrogate-bytes", "surrogate-in-system"],
)
def test_lone_surrogate_in_content_is_400(server: Server, sim: Simulator, body: bytes) -> None:
    error = _error(_post(server, body), 400)
    assert error["type"] == "invalid_request_error"
    assert _upstream(sim) == []


def test_nul_byte_in_content_round_trips(server: Server, sim: Simulator) -> None:
    text = "before\x00after \u0000 end"
    sim.script([{"reply": {"text": "got it"}}, {"reply": {"text": "again"}}])
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": text}]})
    assert resp.status_code == 200, resp.text
    sid = resp.headers["x-session-id"]
    assert _upstream(sim)[0]["messages"][-1]["content"] == text
    assert _messages(server, sid)[0]["content"] == text
    # Replayed from SQLite on the next turn, byte for byte.
    resp2 = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "more"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
    )
    assert resp2.status_code == 200, resp2.text
    sim.assert_script_done()
    replay = [m for m in _upstream(sim)[1]["messages"] if m["role"] == "user"]
    assert [m["content"] for m in replay] == [text, "more"]


def test_one_megabyte_message_is_accepted(server: Server, sim: Simulator) -> None:
    sim.configure(context_window=2_000_000)  # until the next reset
    big = "0123456789abcdef" * (1024 * 1024 // 16 - 1) + "THE-END-MARKER"
    assert len(big) > 1_000_000
    sim.script([{"expect": {"last_user_contains": "THE-END-MARKER"}, "reply": {"text": "read"}}])
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": big}]})
    assert resp.status_code == 200, resp.text[:2000]
    assert resp.json()["choices"][0]["message"]["content"] == "read"
    sim.assert_script_done()
    assert _upstream(sim)[0]["messages"][-1]["content"] == big
    assert _messages(server, resp.headers["x-session-id"])[0]["content"] == big


def test_a_refusal_deep_in_a_long_history_is_the_same_400(server: Server, sim: Simulator) -> None:
    # Past 64 messages the check runs off the event loop: the same error shape, nothing run.
    history: list[dict[str, Any]] = []
    for i in range(200):
        history.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
    history.append({"role": "function", "name": "f", "content": "legacy"})
    before = len(sim.requests())
    error = _error(_post(server, {"model": "courier", "messages": history}), 400)
    assert error["param"] == "messages[200].role" and "function" in error["message"]
    assert len(sim.requests()) == before
    _healthy(server)


# ------------------------------------------------------------- 4. authentication


def test_valid_key_works(server: Server) -> None:
    assert _raw_status(server, b"Bearer " + API_KEY.encode()) == 200
    resp = httpx.get(f"{server.base_url}/v1/models", headers=server.headers(), timeout=10)
    assert resp.status_code == 200 and resp.json()["data"][0]["id"] == "courier"


def _near_misses() -> list[tuple[str, bytes]]:
    key = API_KEY.encode()
    last = key[-1:]
    other = b"g" if last != b"g" else b"h"
    return [
        ("last-char-differs", b"Bearer " + key[:-1] + other),
        ("last-char-case", b"Bearer " + key[:-1] + last.upper()),
        ("missing-last-char", b"Bearer " + key[:-1]),
        ("one-extra-char", b"Bearer " + key + b"0"),
        ("key-then-junk", b"Bearer " + key + b" extra"),
        ("lowercase-bearer-wrong-key", b"bearer " + key[:-1] + other),
        ("key-without-scheme", key),
        ("scheme-glued-to-key", b"Bearer" + key),
        ("basic-scheme-with-key", b"Basic " + key),
        ("key-twice", b"Bearer " + key + b"," + key),
    ]


@pytest.mark.parametrize(
    "authorization", [a for _, a in _near_misses()], ids=[i for i, _ in _near_misses()]
)
def test_near_miss_keys_are_401(server: Server, authorization: bytes) -> None:
    assert _raw_status(server, authorization) == 401


def test_near_miss_key_on_chat_is_openai_shaped_401(server: Server, sim: Simulator) -> None:
    wrong = API_KEY[:-1] + ("g" if API_KEY[-1] != "g" else "h")
    error = _error(_post(server, GOOD, headers={"Authorization": f"Bearer {wrong}"}), 401)
    assert error["type"] == "authentication_error"
    assert _upstream(sim) == []


@pytest.mark.parametrize(
    "authorization",
    [
        b"bearer " + API_KEY.encode(),
        b"BEARER " + API_KEY.encode(),
        # Spaces and tabs around a field value are not part of it (RFC 9110 5.5): the
        # HTTP parser drops them before the server sees the header.
        b"Bearer " + API_KEY.encode() + b" ",
        b"Bearer " + API_KEY.encode() + b"\t",
    ],
    ids=["lowercase-scheme", "uppercase-scheme", "trailing-space", "trailing-tab"],
)
def test_scheme_is_case_insensitive_and_ows_is_not_part_of_the_key(
    server: Server, authorization: bytes
) -> None:
    # RFC 9110 11.1: the auth scheme is case-insensitive, so `bearer <key>` is the key.
    assert _raw_status(server, authorization) == 200


@pytest.mark.parametrize("suffix", [b"\xa0", b"\x85"], ids=["trailing-nbsp", "trailing-next-line"])
def test_key_with_trailing_non_ascii_whitespace_is_401(server: Server, suffix: bytes) -> None:
    assert _raw_status(server, b"Bearer " + API_KEY.encode() + suffix) == 401


# ------------------------------------------------------------- 5. session ownership


def test_made_up_session_id_is_404(server: Server, sim: Simulator) -> None:
    for headers, body in (
        (server.headers(**{"X-Session-Id": "sess_madeUpButPlausible0123456"}), GOOD),
        (server.headers(), {**GOOD, "session_id": "sess_madeUpButPlausible0123456"}),
    ):
        error = _error(_post(server, body, headers=headers), 404)
        assert error["code"] == "session_not_found"
    usage = httpx.get(
        f"{server.base_url}/v1/sessions/sess_madeUpButPlausible0123456/usage",
        headers=server.headers(),
        timeout=10,
    )
    assert _error(usage, 404)["code"] == "session_not_found"
    assert _upstream(sim) == []


def test_other_keys_session_is_invisible(server: Server, sim: Simulator) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    sim.script([{"reply": {"text": "admin's answer"}}, {"reply": {"text": "admin again"}}])
    created = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "admin private"}]},
        headers=admin,
    )
    assert created.status_code == 200, created.text
    sid = created.headers["x-session-id"]
    before = _messages(server, sid)

    # The main key can neither continue nor read it, and the answer is the one a missing
    # session gets: no oracle for which ids exist.
    hijack = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "hijack"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
    )
    error = _error(hijack, 404)
    assert error["code"] == "session_not_found"
    missing = _error(
        _post(server, GOOD, headers=server.headers(**{"X-Session-Id": sid + "x"})), 404
    )
    assert {**error, "message": ""} == {**missing, "message": ""}

    ledger = f"{server.base_url}/v1/sessions/{sid}/usage"
    denied = httpx.get(ledger, headers=server.headers(), timeout=10)
    assert _error(denied, 404)["code"] == "session_not_found"
    assert "admin" not in denied.text
    # A metrics-only key has no chat scope at all.
    metrics = httpx.get(ledger, headers={"Authorization": f"Bearer {METRICS_KEY}"}, timeout=10)
    assert _error(metrics, 403)["code"] == "insufficient_scope"

    allowed = httpx.get(ledger, headers=admin, timeout=10)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["session_id"] == sid
    assert allowed.json()["total_calls"] == 1

    # Nothing was appended by the refused attempts; the owner still continues it.
    assert _messages(server, sid) == before
    assert len(_upstream(sim)) == 1
    own = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "mine"}]},
        headers={**admin, "X-Session-Id": sid},
    )
    assert own.status_code == 200, own.text
    sim.assert_script_done()
    assert not any("hijack" in (r["content"] or "") for r in _messages(server, sid))


# ------------------------------------------------------------- 6. path traversal


def test_tools_refuse_paths_outside_the_workspace(server: Server, sim: Simulator) -> None:
    calls = [
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "trap/link"}),
        ("list_files", {"path": ".."}),
        ("list_files", {"path": "trap/dirlink"}),
        ("read_file", {"path": "trap/dirlink/secret.txt"}),
        ("read_file", {"path": "trap/../../outside/secret.txt"}),
    ]
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        {"name": name, "arguments": args, "id": f"call_t{i}"}
                        for i, (name, args) in enumerate(calls)
                    ]
                }
            },
            {"reply": {"text": "I could not read those."}},
        ]
    )
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": "peek"}]})
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    sid = resp.headers["x-session-id"]

    results = [m for m in _upstream(sim)[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [f"call_t{i}" for i in range(len(calls))]
    for message in results:
        assert message["content"].startswith("error:"), message
        assert "outside the workspace" in message["content"], message

    stored = [r for r in _messages(server, sid) if r["role"] == "tool"]
    assert len(stored) == len(calls) and all(r["is_error"] for r in stored)

    # Nothing of the files' contents went anywhere: upstream, the log, or the client.
    everywhere = [r["body"] for r in sim.requests()]
    everywhere += [r["content"] or "" for r in _messages(server, sid)]
    everywhere.append(resp.text)
    for blob in everywhere:
        assert SECRET not in blob
        assert "root:x:0:0" not in blob


def test_dangling_symlink_does_not_break_listing(
    server: Server, sim: Simulator, dirs: dict[str, Path]
) -> None:
    folder = dirs["workspace"] / "dangling"
    folder.mkdir(exist_ok=True)
    (folder / "visible.txt").write_text("hello")
    broken = folder / "broken"
    if not broken.is_symlink():
        broken.symlink_to(dirs["outside"] / "does-not-exist")
    sim.script(
        [
            {"reply": {"tool_calls": [{"name": "list_files", "arguments": {"path": "dangling"}}]}},
            {"reply": {"text": "listed"}},
        ]
    )
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": "ls"}]})
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    result = next(m for m in _upstream(sim)[1]["messages"] if m["role"] == "tool")
    assert "visible.txt" in result["content"]


# ------------------------------------------------------------- 7. still standing


def test_server_survived_everything(server: Server, sim: Simulator) -> None:
    _healthy(server)
    sim.script([{"reply": {"text": "still serving"}}])
    resp = _post(server, GOOD)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "still serving"
