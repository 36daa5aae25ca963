"""Several upstream keys on one profile, over HTTP against the simulator: a refused or
throttled key is rotated past at once, rests, and stays resting across a restart."""

from __future__ import annotations

import sqlite3

import httpx

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

KEY_A = "sim-key-a-000000"
KEY_B = "sim-key-b-111111"


def _server(servers: ServerFactory) -> Server:
    return servers(COURIER_UPSTREAM_API_KEY=KEY_A, COURIER_UPSTREAM_API_KEYS=KEY_B)


def _chat(server: Server, text: str) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=30
    )


def _keys_used(sim: Simulator) -> list[str]:
    return [r["headers"]["authorization"].removeprefix("Bearer ") for r in sim.requests()]


def test_refused_key_is_rotated_and_stays_out_after_restart(
    sim: Simulator, servers: ServerFactory
) -> None:
    sim.configure(required_key=KEY_B)
    server = _server(servers)
    sim.script([{"reply": {"text": "via b"}}])
    resp = _chat(server, "first")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "via b"
    assert _keys_used(sim) == [KEY_A, KEY_B]
    # One upstream call in the ledger: the rotation happened inside it.
    usage = httpx.get(
        f"{server.base_url}/v1/sessions/{resp.headers['x-session-id']}/usage",
        headers=server.headers(),
    ).json()
    assert usage["totals"]["upstream_calls"] == 1
    server.stop()

    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        rows = con.execute("SELECT key_id, reason FROM upstream_key_state").fetchall()
    finally:
        con.close()
    assert [reason for _, reason in rows] == ["auth"]
    assert all(KEY_A not in key_id and KEY_B not in key_id for key_id, _ in rows)

    server.start()  # the cool-down outlives the process
    before = len(sim.requests())
    sim.script([{"reply": {"text": "still b"}}])
    resp = _chat(server, "second")
    assert resp.status_code == 200, resp.text
    assert _keys_used(sim)[before:] == [KEY_B]


def test_throttled_key_rotates_without_waiting_out_retry_after(
    sim: Simulator, servers: ServerFactory
) -> None:
    server = _server(servers)
    # Retry-After 300 s: honoured by resting the key, not by parking the turn.
    sim.script(
        [
            {"fault": {"status": 429, "retry_after": 300}},
            {"reply": {"text": "served by b"}},
            {"reply": {"text": "b again"}},
        ]
    )
    resp = _chat(server, "one")
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "served by b"
    resp = _chat(server, "two")
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    assert _keys_used(sim) == [KEY_A, KEY_B, KEY_B]


def test_every_key_refused_is_one_clear_error(sim: Simulator, servers: ServerFactory) -> None:
    sim.configure(required_key="some-other-key-entirely")
    server = _server(servers)
    resp = _chat(server, "anyone")
    assert resp.status_code == 403, resp.text
    assert resp.json()["error"]["code"] == "upstream_auth"
    assert resp.headers["x-should-retry"] == "false"
    assert _keys_used(sim) == [KEY_A, KEY_B]  # each key once, no retries
    assert KEY_A not in resp.text and KEY_B not in resp.text
