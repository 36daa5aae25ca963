"""Background responses (OpenAI's `background: true`) over HTTP, with the official SDK,
against the real server and the simulator: create, poll, cancel, resume the event stream
by sequence number (also after a restart), and what a drain or a crash leaves behind.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support.approvals import call, decide, pending
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.spec import validate
from tests.support.waiting import wait_for

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef"
STALLED = {"stall_after_events": 3, "stall_ms": 600_000}
"""A reply whose upstream goes silent after its first events: a response that runs until
someone acts on it."""


@pytest.fixture(scope="module")
def bg_server(module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> Server:
    """Two keys, so one key's response is another's 404."""
    config = tmp_path_factory.mktemp("bg-config") / "keys.toml"
    config.write_text(
        f'[[keys]]\nname = "alice"\nkey = "{ALICE}"\nscopes = ["chat"]\n\n'
        f'[[keys]]\nname = "bob"\nkey = "{BOB}"\nscopes = ["chat"]\n'
    )
    return module_servers(COURIER_CONFIG=str(config), COURIER_RESPONSE_EVENT_FLUSH_S="0.2")


def _client(server: Server, key: str | None = None) -> OpenAI:
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=key or server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )


def _settled(client: OpenAI, response_id: str) -> Any:
    """Poll as a client would, until the response leaves queued/in_progress."""
    found: list[Any] = []

    def done() -> bool:
        found[:] = [client.responses.retrieve(response_id)]
        return found[0].status not in ("queued", "in_progress")

    wait_for(done)
    return found[0]


def _raw_stream(server: Server, response_id: str, key: str, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{server.base_url}/v1/responses/{response_id}",
        params={"stream": "true", **params},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def _stream_events(server: Server, response_id: str, key: str, **params: Any) -> list[Any]:
    answer = _raw_stream(server, response_id, key, **params)
    assert answer.status_code == 200, answer.text
    return _events(answer.text.splitlines())


def test_the_sdk_creates_polls_and_reads_a_background_response(
    sim: Simulator, bg_server: Server
) -> None:
    sim.script([{"reply": {"text": "Done in the background."}}])
    client = _client(bg_server, ALICE)
    created = client.responses.create(model="courier", input="work", background=True)
    assert created.background is True
    assert created.status in ("queued", "in_progress")
    final = _settled(client, created.id)
    assert final.status == "completed"
    assert final.background is True
    assert final.output_text == "Done in the background."
    # The whole stream is stored and replays from 0, numbered without a gap.
    events = _stream_events(bg_server, created.id, ALICE)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert events[0]["response"]["status"] == "queued"
    assert events[-1]["type"] == "response.completed"
    # The SDK's stream helper replays from 0 and skips what it had itself.
    with client.responses.stream(response_id=created.id, starting_after=2) as helper:
        assert helper.get_final_response().output_text == "Done in the background."
    assert events[-1]["response"] == final.model_dump(mode="json", exclude_unset=True) | {
        "session_id": events[-1]["response"]["session_id"]
    }


def test_background_bodies_and_events_match_the_spec(sim: Simulator, bg_server: Server) -> None:
    sim.script([{"reply": {"text": "to the letter"}}])
    headers = {"Authorization": f"Bearer {ALICE}"}
    created = httpx.post(
        f"{bg_server.base_url}/v1/responses",
        json={"model": "courier", "input": "spec", "background": True},
        headers=headers,
    )
    assert created.status_code == 200, created.text
    validate("Response", created.json())
    assert created.json()["status"] == "queued"
    response_id = created.json()["id"]
    _settled(_client(bg_server, ALICE), response_id)
    polled = httpx.get(f"{bg_server.base_url}/v1/responses/{response_id}", headers=headers)
    validate("Response", polled.json())
    for event in _stream_events(bg_server, response_id, ALICE):
        validate("ResponseStreamEvent", event)
    cancelled = httpx.post(
        f"{bg_server.base_url}/v1/responses/{response_id}/cancel", headers=headers
    )
    validate("Response", cancelled.json())
    assert cancelled.json() == polled.json()  # it had ended: cancel changes nothing


def test_a_streamed_background_response_resumes_by_sequence_number(
    sim: Simulator, bg_server: Server
) -> None:
    sim.script([{"reply": {"text": "one two three four five six"}, "fault": STALLED}])
    client = _client(bg_server, ALICE)
    seen: list[Any] = []
    with client.responses.create(
        model="courier", input="go", background=True, stream=True
    ) as stream:
        for event in stream:
            seen.append(event)
            if len(seen) == 3:
                break  # the client hangs up: a background response runs on
    response_id = seen[0].response.id
    last = seen[-1].sequence_number
    assert client.responses.retrieve(response_id).status == "in_progress"
    # Resumed live (the upstream is still stalled), then finished by a cancel.
    resumed: list[Any] = []
    with client.responses.retrieve(response_id, stream=True, starting_after=last) as live:
        for event in live:
            resumed.append(event)
            if event.type == "response.output_text.delta":
                client.responses.cancel(response_id)
    numbers = [e.sequence_number for e in resumed]
    assert numbers == list(range(last + 1, last + 1 + len(numbers)))
    assert resumed[-1].response.status == "cancelled"
    # Afterwards from the store: the same events, the same numbers.
    with client.responses.retrieve(response_id, stream=True, starting_after=last) as stored:
        replayed = list(stored)
    assert [e.model_dump() for e in replayed] == [e.model_dump() for e in resumed]


def test_cancel_stops_the_upstream_call_and_is_idempotent(
    sim: Simulator, bg_server: Server
) -> None:
    sim.script(
        [
            {"reply": {"text": "never finished"}, "fault": STALLED},
            {"reply": {"text": "a second call must not happen"}},
        ]
    )
    client = _client(bg_server, ALICE)
    created = client.responses.create(model="courier", input="long", background=True)
    wait_for(lambda: sim.stats()["model_requests"] == 1)
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    wait_for(lambda: sim.stats()["disconnects"] == 1)
    assert sim.stats()["model_requests"] == 1
    assert sim.status()["remaining"] == 1
    again = client.responses.cancel(created.id)
    assert again.model_dump() == cancelled.model_dump()
    assert client.responses.retrieve(created.id).status == "cancelled"


def test_hostile_background_requests_get_clear_errors(sim: Simulator, bg_server: Server) -> None:
    sim.script([{"reply": {"text": "mine"}}, {"reply": {"text": "foreground"}}])
    alice, bob = _client(bg_server, ALICE), _client(bg_server, BOB)
    with pytest.raises(openai.BadRequestError) as refused:
        alice.responses.create(model="courier", input="x", background=True, store=False)
    assert refused.value.body["param"] == "store"  # type: ignore[index]
    created = alice.responses.create(model="courier", input="x", background=True)
    assert _settled(alice, created.id).status == "completed"
    # Another key's response is missing, for every verb.
    with pytest.raises(openai.NotFoundError):
        bob.responses.cancel(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    assert _raw_stream(bg_server, created.id, BOB).status_code == 404
    # Positions the client cannot have seen, or that are no position at all.
    last = _stream_events(bg_server, created.id, ALICE)[-1]["sequence_number"]
    for bad in ("-1", str(last + 1), "abc", "1.5"):
        answer = _raw_stream(bg_server, created.id, ALICE, starting_after=bad)
        assert answer.status_code == 400, (bad, answer.text)
        assert answer.json()["error"]["param"] in ("starting_after", "query.starting_after")
    assert _stream_events(bg_server, created.id, ALICE, starting_after=str(last)) == []
    # A foreground response is neither cancelled nor streamed again.
    foreground = alice.responses.create(model="courier", input="y")
    with pytest.raises(openai.BadRequestError):
        alice.responses.cancel(foreground.id)
    assert _raw_stream(bg_server, foreground.id, ALICE).status_code == 400


def _server(servers: ServerFactory, tmp_path: Path, **extra: str) -> tuple[Server, Path]:
    """Unstarted, with the test tool that waits (so a test can act while it runs)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    server = servers(
        start=False,
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_WORKSPACE=str(workspace),
        **extra,
    )
    return server, workspace


def _waiting(seconds: float, text: str = "Waiting.") -> dict[str, Any]:
    call = {"name": "wait", "arguments": {"seconds": seconds}, "id": "w_bg"}
    return {"reply": {"text": text, "tool_calls": [call]}}


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_a_drained_streamed_response_ends_failed_not_completed(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    """A turn cut off by the drain ends `interrupted`: half an answer is not `completed`."""
    server, workspace = _server(servers, tmp_path, COURIER_DRAIN_TIMEOUT_S="1")
    server.start()
    sim.script([_waiting(120)])
    out: dict[str, Any] = {}

    def run() -> None:
        body = {"model": "courier", "input": "wait", "stream": True}
        with httpx.stream(
            "POST",
            f"{server.base_url}/v1/responses",
            json=body,
            headers=server.headers(),
            timeout=60,
        ) as resp:
            out["lines"] = lines = []
            try:
                for line in resp.iter_lines():
                    lines.append(line)
            except httpx.HTTPError as exc:
                out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    wait_for(lambda: (workspace / "wait-started").exists())
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)
    thread.join(10)
    # The stream itself is cut by uvicorn before the drain; what was stored must not
    # say `completed` for half an answer.
    created = _events(out["lines"])[0]["response"]["id"]
    server.start()
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key=server.api_key, max_retries=0)
    stored = client.responses.retrieve(created)
    assert stored.status == "failed"
    assert stored.error is not None and stored.error.code == "server_error"
    assert "interrupted" in stored.error.message


def test_an_approval_in_a_background_run_waits_for_the_approvals_api(
    sim: Simulator, bg_server: Server
) -> None:
    """Nobody watches a background turn: its approval waits on `POST /v1/approvals/{id}`."""
    write = call("write_file", path="AGENTS.md", content="protected, so it asks")
    sim.script([{"reply": {"tool_calls": [write]}}, {"reply": {"text": "written"}}])
    client = _client(bg_server, ALICE)
    created = client.responses.create(model="courier", input="write it", background=True)
    [approval] = pending(bg_server)
    assert approval["tool"] == "write_file"
    assert client.responses.retrieve(created.id).status == "in_progress"
    assert decide(bg_server, approval["id"], "once").status_code == 200
    final = _settled(client, created.id)
    assert final.status == "completed" and final.output_text == "written"


def _db(server: Server, query: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return list(con.execute(query, args))
    finally:
        con.close()


def test_a_restart_mid_run_marks_it_failed_and_keeps_its_stream(
    sim: Simulator, servers: ServerFactory
) -> None:
    """kill -9 while the upstream is silent: after the restart the response is `failed`
    (never `completed`), its stored events replay, then `response.failed` follows them."""
    server = servers(COURIER_RESPONSE_EVENT_FLUSH_S="0.2")
    sim.script([{"reply": {"text": "alpha beta gamma delta"}, "fault": STALLED}])
    client = _client(server)
    created = client.responses.create(model="courier", input="crash", background=True)
    # Wait until the first deltas are stored (a flush after them), then crash.
    wait_for(lambda: _db(server, "SELECT events_through FROM response_record")[0][0] >= 4)
    server.kill()
    stored_through = _db(server, "SELECT events_through FROM response_record")[0][0]
    server.start()
    client = _client(server)
    after = client.responses.retrieve(created.id)
    assert after.status == "failed"
    assert after.error is not None and "interrupted" in after.error.message
    events = _stream_events(server, created.id, server.api_key)
    assert [e["sequence_number"] for e in events] == list(range(stored_through + 2))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "failed"
    # Resumed from where a client had read to: only the terminal event is left.
    tail = _stream_events(server, created.id, server.api_key, starting_after=stored_through)
    assert [e["type"] for e in tail] == ["response.failed"]
    # Nothing was run again: one upstream call in all.
    assert sim.stats()["model_requests"] == 1
    assert _db(server, "SELECT exit_reason FROM turn") == [("interrupted",)]


def test_a_drained_background_response_ends_failed(sim: Simulator, servers: ServerFactory) -> None:
    server = servers(COURIER_DRAIN_TIMEOUT_S="1")
    sim.script([{"reply": {"text": "cut off"}, "fault": STALLED}])
    created = _client(server).responses.create(model="courier", input="drain", background=True)
    wait_for(lambda: sim.stats()["model_requests"] == 1)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)
    # Recorded by the draining process itself, not by the next one's repair.
    assert _db(server, "SELECT status FROM response_record") == [("failed",)]
    server.start()
    final = _client(server).responses.retrieve(created.id)
    assert final.status == "failed"
    assert final.error is not None and "interrupted" in final.error.message
    events = _stream_events(server, created.id, server.api_key)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
