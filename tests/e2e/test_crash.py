"""kill -9 while a tool call is in flight; the restarted server repairs the transcript."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import ServerFactory
from tests.support.sim import Simulator


def _rows(db: Path, session_id: str | None = None) -> list[dict[str, Any]]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        query = "SELECT * FROM message"
        if session_id:
            query += " WHERE session_id = ?"
        return [
            dict(r)
            for r in con.execute(query + " ORDER BY id", (session_id,) if session_id else ())
        ]
    finally:
        con.close()


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_kill_during_tool_call_then_resume(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = servers(
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT", COURIER_WORKSPACE=str(workspace)
    )
    db = server.data_dir / "courier.db"
    sim.script(
        [
            {
                "reply": {
                    "text": "Waiting.",
                    "tool_calls": [
                        {"name": "wait", "arguments": {"seconds": 60}, "id": "call_wait_1"}
                    ],
                }
            }
        ]
    )
    session: dict[str, str] = {}

    def first_turn() -> None:
        try:
            with httpx.stream(
                "POST",
                f"{server.base_url}/v1/chat/completions",
                json={
                    "model": "courier",
                    "stream": True,
                    "messages": [{"role": "user", "content": "please wait"}],
                },
                headers=server.headers(),
                timeout=30,
            ) as resp:
                session["id"] = resp.headers["x-session-id"]
                for _ in resp.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # the server dies under us: that is the point

    worker = threading.Thread(target=first_turn, daemon=True)
    worker.start()
    _wait_for(lambda: (workspace / "wait-started").exists())
    server.kill()
    worker.join(10)
    sid = session["id"]

    # The intent is durable: the assistant row with the call is there, its result is not.
    rows = _rows(db, sid)
    assert [r["role"] for r in rows] == ["user", "assistant"]
    assert json.loads(rows[1]["tool_calls"])[0]["id"] == "call_wait_1"

    server.start()
    sim.script(
        [
            {
                "expect": {"last_user_contains": "still there?"},
                "reply": {"text": "Yes, the wait was interrupted."},
            }
        ]
    )
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "still there?"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    upstream = json.loads(sim.requests()[-1]["body"])["messages"]
    shape = [(m["role"], m.get("tool_call_id")) for m in upstream if m["role"] != "system"]
    assert shape == [
        ("user", None),
        ("assistant", None),
        ("tool", "call_wait_1"),
        ("user", None),
    ]
    closing = next(m for m in upstream if m["role"] == "tool")
    assert "interrupted" in closing["content"]
    # The repair is in the durable log too, directly after the call.
    roles = [r["role"] for r in _rows(db, sid)]
    assert roles == ["user", "assistant", "tool", "user", "assistant"]
