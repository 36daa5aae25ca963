"""Stop and observe over HTTP: the turns list with exit reasons, usage and cost; stopping
a turn mid-tool; replaying a turn's numbered events after N and following the live one."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ws")


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory, workspace: Path) -> Server:
    return module_servers(
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT", COURIER_WORKSPACE=str(workspace)
    )


def _chat(server: Server, text: str, sid: str | None = None) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    return httpx.post(f"{server.base_url}{URL}", json=body, headers=headers, timeout=30)


def _get(server: Server, path: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers=server.headers(), timeout=30)


def _turns(server: Server, sid: str) -> list[dict[str, Any]]:
    resp = _get(server, f"/v1/sessions/{sid}/turns")
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


def _events(server: Server, sid: str, after: int = 0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with httpx.stream(
        "GET",
        f"{server.base_url}/v1/sessions/{sid}/events",
        params={"after": after},
        headers=server.headers(),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200, resp.read()
        ids: list[int] = []
        for line in resp.iter_lines():
            if line.startswith("id: "):
                ids.append(int(line[4:]))
            elif line.startswith("data: "):
                out.append(json.loads(line[6:]))
    assert ids == [e["seq"] for e in out]  # the SSE id is the sequence number
    return out


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_turns_list_exit_reasons_calls_usage_and_cost(srv: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "First answer."}},
            {"reply": {"text": None}},
            {"reply": {"text": None}},
        ]
    )
    first = _chat(srv, "one")
    assert first.status_code == 200, first.text
    sid = first.headers["x-session-id"]
    second = _chat(srv, "two", sid)
    assert second.status_code == 502, second.text
    turns = _turns(srv, sid)
    assert [(t["exit_reason"], t["upstream_calls"], t["status"]) for t in turns] == [
        ("completed", 1, "finished"),
        ("empty_reply", 2, "finished"),
    ]
    assert turns[1]["error"] == "empty_reply"
    for turn in turns:
        assert turn["ended_at"] >= turn["started_at"]
        assert turn["usage"]["prompt_tokens"] > 0
        assert turn["profiles"] == ["courier"]
    # The turns add up to the session's ledger totals.
    totals = _get(srv, f"/v1/sessions/{sid}/usage").json()["totals"]
    assert sum(t["upstream_calls"] for t in turns) == totals["upstream_calls"]
    assert sum(t["usage"]["output_tokens"] for t in turns) == totals["output_tokens"]


def test_unknown_session_is_404_on_every_route(srv: Server) -> None:
    for method, path in [
        ("GET", "/v1/sessions/nope/turns"),
        ("GET", "/v1/sessions/nope/events"),
        ("POST", "/v1/sessions/nope/stop"),
    ]:
        resp = httpx.request(method, f"{srv.base_url}{path}", headers=srv.headers())
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["code"] == "session_not_found"
    assert httpx.get(f"{srv.base_url}/v1/sessions/nope/turns").status_code == 401


def test_stop_mid_tool_keeps_a_valid_transcript_and_frees_the_session(
    srv: Server, sim: Simulator, workspace: Path
) -> None:
    marker = workspace / "wait-started"
    marker.unlink(missing_ok=True)
    sim.script(
        [
            {
                "reply": {
                    "text": "Waiting a minute.",
                    "tool_calls": [{"name": "wait", "arguments": {"seconds": 60}, "id": "w1"}],
                }
            },
            {
                "expect": {"last_tool_result_contains": "cancelled"},
                "reply": {"text": "Picking up after the stop."},
            },
        ]
    )
    seen: dict[str, Any] = {"events": []}

    def run() -> None:
        with httpx.stream(
            "POST",
            f"{srv.base_url}{URL}",
            json={
                "model": "courier",
                "stream": True,
                "messages": [{"role": "user", "content": "wait for me"}],
            },
            headers=srv.headers(),
            timeout=30,
        ) as resp:
            seen["sid"] = resp.headers["x-session-id"]
            seen["lines"] = list(resp.iter_lines())

    def watch() -> None:
        seen["events"] = _events(srv, seen["sid"])

    client = threading.Thread(target=run, daemon=True)
    client.start()
    _wait_for(marker.exists)
    sid = seen["sid"]
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _wait_for(lambda: [t["status"] for t in _turns(srv, sid)] == ["running"])

    stop = httpx.post(f"{srv.base_url}/v1/sessions/{sid}/stop", headers=srv.headers())
    assert stop.status_code == 200, stop.text
    assert stop.json()["exit_reason"] == "cancelled"
    client.join(10)
    watcher.join(10)
    assert not client.is_alive() and not watcher.is_alive()
    # The watcher followed the live turn to its end, numbered from 1.
    events = seen["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events][-1] == "finished"
    assert events[-1]["exit_reason"] == "cancelled"
    assert "tool.started" in [e["type"] for e in events]
    assert [t["exit_reason"] for t in _turns(srv, sid)] == ["cancelled"]
    # Nothing is left running: a second stop finds no turn, the next message is served.
    again = httpx.post(f"{srv.base_url}/v1/sessions/{sid}/stop", headers=srv.headers())
    assert again.json()["turn_id"] is None
    resp = _chat(srv, "are you there", sid)
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()


def test_events_replay_after_n_yields_exactly_the_rest(srv: Server, sim: Simulator) -> None:
    sim.script(
        [
            {
                "reply": {
                    "text": "Let me wait.",
                    "tool_calls": [{"name": "wait", "arguments": {"seconds": 0}, "id": "w2"}],
                }
            },
            {"reply": {"text": "Done waiting."}},
        ]
    )
    resp = _chat(srv, "short wait")
    assert resp.status_code == 200, resp.text
    sid = resp.headers["x-session-id"]
    everything = _events(srv, sid)
    types = [e["type"] for e in everything]
    assert types[0] == "text" and types[-1] == "finished"
    assert {"tool.started", "tool.finished"} <= set(types)
    assert everything[-1]["exit_reason"] == "completed"
    assert everything[-1]["usage"]["courier"]["upstream_calls"] == 2
    text = "".join(e["text"] for e in everything if e["type"] == "text")
    assert text == "Let me wait.\n\nDone waiting."
    for n in (1, 2, len(everything) - 1, len(everything), len(everything) + 5):
        assert _events(srv, sid, after=n) == everything[n:]


def test_replays_are_held_to_the_memory_budget(sim: Simulator, servers: ServerFactory) -> None:
    """Finished turns kept for `/events` fit COURIER_REPLAY_MEMORY_MB: past it the oldest
    is forgotten with a clear 404, the newest still replays whole."""
    server = servers(COURIER_REPLAY_MEMORY_MB="1")
    answer = " ".join(f"{i:05}" + "x" * 400 for i in range(1_500))  # 600 KB per turn
    sim.script([{"reply": {"text": answer}}] * 3)
    sids = []
    for i in range(3):
        resp = _chat(server, f"ask {i}")
        assert resp.status_code == 200, resp.text
        sids.append(resp.headers["x-session-id"])
    gone = _get(server, f"/v1/sessions/{sids[0]}/events")
    assert gone.status_code == 404, gone.text
    assert gone.json()["error"]["code"] == "turn_not_found"
    events = _events(server, sids[2])
    assert "".join(e.get("text", "") for e in events if e["type"] == "text") == answer
    assert events[-1]["type"] == "finished"
