"""The fault matrix over HTTP: each simulator fault ends as documented (retried and
served, or a clear error carrying `x-should-retry`) with a named exit reason on the turns
route, and a permanent error costs exactly one upstream attempt."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.server import Server
from tests.support.sim import Simulator

OK = {"reply": {"text": "Recovered."}}


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
