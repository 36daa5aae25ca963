"""The iteration budget: when it runs out, one last call with tools forbidden."""

from __future__ import annotations

import json
import sqlite3

import httpx

from tests.support.server import ServerFactory
from tests.support.sim import Simulator

LOOP = {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}}


def test_budget_exhaustion_forces_a_final_answer(sim: Simulator, servers: ServerFactory) -> None:
    server = servers(COURIER_MAX_ITERATIONS="2")
    sim.script([LOOP, LOOP, {"reply": {"text": "Stopping here: I used my tool budget."}}])
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "loop forever"}]},
        headers=server.headers(),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"].startswith("Stopping here")
    sim.assert_script_done()
    bodies = [json.loads(r["body"]) for r in sim.requests()]
    assert [b.get("tool_choice") for b in bodies] == [None, None, "none"]
    # The schemas stay: a transcript with tool calls needs them defined.
    assert bodies[-1]["tools"]
    con = sqlite3.connect(server.data_dir / "courier.db")
    reasons = con.execute("SELECT exit_reason, iterations FROM turn").fetchall()
    assert reasons == [("budget_exhausted", 3)]
