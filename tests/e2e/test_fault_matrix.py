"""The fault matrix over HTTP: each simulator fault ends as documented (retried and
served, compacted, or a clear error carrying `x-should-retry`) with a named exit reason on
the turns route, and a permanent error costs exactly one upstream attempt. On each wire: a
hung upstream (the read timeout fires), a stream hung mid-answer, the upstream's own
context-length error (compacted and retried), and no stream silent longer than the
keepalive interval, counted in comment frames, not measured."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.agent.context.compressor import OVERFLOW_RETRIES
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

OK = {"reply": {"text": "Recovered."}}
SUMMARISER = "You write compact, faithful working notes"


def _turn(server: Server, sid: str) -> dict[str, Any]:
    resp = httpx.get(f"{server.base_url}/v1/sessions/{sid}/turns", headers=server.headers())
    [turn] = resp.json()["data"]
    return turn  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "steps", "attempts"),
    [
        ("429 with Retry-After", [{"fault": {"status": 429, "retry_after": 0}}, OK], 2),
        ("529 overloaded", [{"fault": {"status": 529}}, OK], 2),
        ("500 server error", [{"fault": {"status": 500}}, OK], 2),
        ("slow headers", [{"fault": {"delay_ms": 300}, **OK}], 1),
    ],
)
def test_transient_faults_are_retried_and_served(
    server: Server, sim: Simulator, name: str, steps: list[dict[str, Any]], attempts: int
) -> None:
    sim.script(steps)
    body = {"model": "courier", "messages": [{"role": "user", "content": f"matrix {name}"}]}
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=30
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Recovered."
    assert len(sim.requests()) == attempts
    turn = _turn(server, resp.headers["x-session-id"])
    assert (turn["exit_reason"], turn["upstream_calls"]) == ("completed", 1)


@pytest.mark.parametrize(
    ("name", "fault", "status", "code", "retry", "attempts"),
    [
        (
            "content policy",
            {"status": 400, "message": "content_policy"},
            400,
            "content_policy",
            False,
            1,
        ),
        (
            "unknown model",
            {"status": 404, "message": "model not found"},
            400,
            "not_found",
            False,
            1,
        ),
        ("bad key", {"status": 401, "message": "Incorrect API key"}, 403, "auth", False, 1),
        (
            "bad request",
            {"status": 400, "message": "Unknown parameter"},
            400,
            "bad_request",
            False,
            1,
        ),
        ("overloaded throughout", {"status": 529}, 503, "overloaded", True, 3),
    ],
)
def test_failures_are_clear_errors_with_an_exit_reason(
    server: Server,
    sim: Simulator,
    name: str,
    fault: dict[str, Any],
    status: int,
    code: str,
    retry: bool,
    attempts: int,
) -> None:
    sim.script([{"fault": fault}] * attempts)
    body = {"model": "courier", "messages": [{"role": "user", "content": f"matrix {name}"}]}
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=30
    )
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == f"upstream_{code}"
    assert resp.headers["x-should-retry"] == ("true" if retry else "false")
    assert len(sim.requests()) == attempts  # a permanent error: exactly one attempt
    turn = _turn(server, resp.headers["x-session-id"])
    assert (turn["exit_reason"], turn["error"]) == ("upstream_error", f"upstream_{code}")


def test_stream_dropped_mid_answer_is_an_error_in_the_stream(
    server: Server, sim: Simulator
) -> None:
    sim.script(
        [{"reply": {"text": "This answer will be cut short"}, "fault": {"drop_after_events": 3}}]
    )
    body = {
        "model": "courier",
        "stream": True,
        "messages": [{"role": "user", "content": "matrix drop"}],
    }
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(),
        timeout=30,
    ) as resp:
        sid = resp.headers["x-session-id"]
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert '"upstream_stream_dropped"' in lines[-2]
    assert len(sim.requests()) == 1  # text already shown: a retry would repeat it
    turn = _turn(server, sid)
    assert (turn["exit_reason"], turn["error"]) == ("upstream_error", "upstream_stream_dropped")


# -- timeouts, context overflow and keepalives, on each wire ---------------------------------

UPSTREAM_TIMEOUT_S = 1.5
"""Short, so a hung upstream costs the test seconds; the faults below stall for twice it."""
KEEPALIVE_S = 0.1
HANG_MS = 3_000
"""Longer than the upstream timeout: the read timeout, not the simulator, ends the wait."""
SLOW_MS = 600
"""Shorter than the upstream timeout, six keepalive intervals long."""


def _file_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"file {i} " + ("lorem ipsum dolor sit amet " * 300))
    return ws


@pytest.fixture(scope="module", params=["openai", "anthropic"])
def wire(
    request: pytest.FixtureRequest,
    module_servers: ServerFactory,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    """A server on each wire with a short upstream timeout and keepalive interval; stopped
    when the other wire's tests begin, so only one runs at a time."""
    tmp = tmp_path_factory.mktemp(f"faults-{request.param}")
    server = module_servers(
        request.param,
        COURIER_UPSTREAM_TIMEOUT_S=str(UPSTREAM_TIMEOUT_S),
        COURIER_KEEPALIVE_S=str(KEEPALIVE_S),
        COURIER_WORKSPACE=str(_file_workspace(tmp)),
        COURIER_CONTEXT_WINDOW="40000",
        COURIER_MAX_OUTPUT_TOKENS="1000",
        COURIER_COMPACTION_THRESHOLD="1.0",
    )
    yield server
    server.stop()


def _ask(server: Server, text: str, sid: str | None = None) -> httpx.Response:
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=60
    )


def _stream_lines(server: Server, text: str) -> tuple[str, list[str]]:
    """The session id and every raw SSE line (comments included), in order."""
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": text}]}
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(),
        timeout=60,
    ) as resp:
        assert resp.status_code == 200
        return resp.headers["x-session-id"], [line for line in resp.iter_lines() if line]


def _turns_of(server: Server, sid: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{server.base_url}/v1/sessions/{sid}/turns", headers=server.headers())
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


def _content(line: str) -> str:
    if not line.startswith("data: {"):
        return ""
    chunk = json.loads(line.removeprefix("data: "))
    return "".join(c["delta"].get("content") or "" for c in chunk.get("choices", []))


def test_a_hung_upstream_times_out_and_the_retry_serves(wire: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"delay_ms": HANG_MS}, **OK}, OK])
    resp = _ask(wire, "matrix timeout once")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Recovered."
    assert sim.stats()["model_requests"] == 2
    # The timed-out call was abandoned, not left to finish: the read timeout closed it.
    deadline = time.monotonic() + 10  # the simulator notices within its 20 ms poll
    while sim.stats()["disconnects"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sim.stats()["disconnects"] == 1
    [turn] = _turns_of(wire, resp.headers["x-session-id"])
    assert (turn["exit_reason"], turn["error"]) == ("completed", None)


def test_an_upstream_hung_throughout_is_a_retryable_timeout(wire: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"delay_ms": HANG_MS}, **OK}] * 3)
    resp = _ask(wire, "matrix timeout always")
    assert resp.status_code == 504, resp.text
    assert resp.json()["error"]["code"] == "upstream_timeout"
    assert resp.headers["x-should-retry"] == "true"
    assert sim.stats()["model_requests"] == 3
    [turn] = _turns_of(wire, resp.headers["x-session-id"])
    assert (turn["exit_reason"], turn["error"]) == ("upstream_error", "upstream_timeout")


def test_a_stream_that_hangs_mid_answer_ends_with_a_timeout_error(
    wire: Server, sim: Simulator
) -> None:
    reply = {"text": "This answer stalls after a few words"}
    sim.script([{"reply": reply, "fault": {"stall_after_events": 4, "stall_ms": HANG_MS}}])
    sid, lines = _stream_lines(wire, "matrix stall")
    data = [line for line in lines if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"
    assert '"upstream_timeout"' in data[-2]
    assert "".join(_content(line) for line in data[:-2])  # some text went out first
    assert sim.stats()["model_requests"] == 1  # text already shown: a retry would repeat it
    # Silence is filled with keepalives while the upstream hangs, up to the timeout.
    assert lines.count(": keepalive") >= 3
    [turn] = _turns_of(wire, sid)
    assert (turn["exit_reason"], turn["error"]) == ("upstream_error", "upstream_timeout")


def test_no_stream_is_silent_longer_than_the_keepalive(wire: Server, sim: Simulator) -> None:
    # Slow before the first token, then slow again between two chunks (Anthropic's stream
    # opens with message_start, content_block_start and a ping before any text).
    text_events = 3 if wire.env["COURIER_UPSTREAM_PROVIDER"] == "openai" else 5
    fault = {"delay_ms": SLOW_MS, "stall_after_events": text_events, "stall_ms": SLOW_MS}
    sim.script([{"reply": {"text": "one two three four five six"}, "fault": fault}])
    sid, lines = _stream_lines(wire, "matrix keepalive")
    tokens = [i for i, line in enumerate(lines) if _content(line)]
    assert tokens, lines
    before_first = lines[: tokens[0]].count(": keepalive")
    between = [lines[a:b].count(": keepalive") for a, b in pairwise(tokens)]
    # 600 ms of silence at a 100 ms interval: six comments due, three at the very least.
    assert before_first >= 3, lines
    assert max(between, default=0) >= 3, lines
    assert "".join(_content(line) for line in lines) == "one two three four five six"
    [turn] = _turns_of(wire, sid)
    assert turn["exit_reason"] == "completed"


def test_context_overflow_compacts_and_retries(wire: Server, sim: Simulator) -> None:
    sid = None
    for n in range(8):
        sim.script(
            [
                {
                    "reply": {
                        "tool_calls": [
                            {"name": "read_file", "arguments": {"path": f"f{n % 4}.txt"}}
                        ]
                    }
                },
                {"reply": {"text": f"Read part {n}."}},
            ]
        )
        resp = _ask(wire, f"read part {n}", sid)
        assert resp.status_code == 200, resp.text
        sid = resp.headers["x-session-id"]
    assert sid is not None
    sim.assert_script_done()
    # The upstream's real window is smaller than configured: the next call overflows, and
    # the error body is the wire's own "prompt is too long" / context_length_exceeded.
    sim.configure(context_window=16_000)
    sim.script(
        [
            {"reply": {"text": "never sent: this step is used up by the overflow"}},
            {"expect": {"system_contains": SUMMARISER}, "reply": {"text": "## Goal\n- read"}},
            {"expect": {"last_user_contains": "what now"}, "reply": {"text": "recovered"}},
        ]
    )
    resp = _ask(wire, "what now?", sid)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "recovered"
    sim.assert_script_done()
    turn = _turns_of(wire, sid)[-1]
    assert (turn["exit_reason"], turn["error"]) == ("completed", None)
    con = sqlite3.connect(wire.data_dir / "courier.db")
    try:
        outcomes = [r[0] for r in con.execute("SELECT outcome FROM api_call ORDER BY id")]
        (compactions,) = con.execute(
            "SELECT compactions FROM session WHERE id = ?", (sid,)
        ).fetchone()
    finally:
        con.close()
    assert outcomes[-3:] == ["context_overflow", "ok", "ok"]
    assert compactions == 1


def test_a_message_too_long_for_any_compaction_is_a_clear_error(
    wire: Server, sim: Simulator
) -> None:
    sim.configure(context_window=2_000)
    sim.script([OK] * 4)
    resp = _ask(wire, "matrix overflow " + "lorem ipsum dolor sit amet " * 1000)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "upstream_context_overflow"
    assert resp.headers["x-should-retry"] == "false"
    # One message too long on its own leaves nothing to compact: the error after the
    # first call, not OVERFLOW_RETRIES more of the same request.
    assert sim.stats()["model_requests"] == 1 < 1 + OVERFLOW_RETRIES
    [turn] = _turns_of(wire, resp.headers["x-session-id"])
    assert (turn["exit_reason"], turn["error"]) == ("upstream_error", "upstream_context_overflow")
