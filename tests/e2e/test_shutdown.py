"""Graceful shutdown and restart: SIGTERM lets a running turn finish within the drain
timeout, cuts off one that outlasts it as `interrupted` with a valid transcript, refuses
new turns meanwhile; a restart after kill -9 marks the dead turn `interrupted` and closes
its open call before any request arrives."""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _server(servers: ServerFactory, tmp_path: Path, **extra: str) -> tuple[Server, Path]:
    """Unstarted: each test starts it, and most end it with a signal."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    server = servers(
        start=False,
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_WORKSPACE=str(workspace),
        **extra,
    )
    return server, workspace


def _db(server: Server, query: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return list(con.execute(query, args))
    finally:
        con.close()


def _waiting(seconds: float) -> dict[str, Any]:
    call = {"name": "wait", "arguments": {"seconds": seconds}, "id": "w_drain"}
    return {"reply": {"text": "Waiting.", "tool_calls": [call]}}


def _stream_in_thread(server: Server, out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "w"}]}
        try:
            with httpx.stream(
                "POST", f"{server.base_url}{URL}", json=body, headers=server.headers(), timeout=60
            ) as resp:
                out["sid"] = resp.headers["x-session-id"]
                out["lines"] = list(resp.iter_lines())
        except httpx.HTTPError as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sigterm_lets_a_running_turn_finish(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server, workspace = _server(servers, tmp_path)
    server.start()
    sim.script([_waiting(2), {"reply": {"text": "Finished despite the signal."}}])
    out: dict[str, Any] = {}
    thread = _stream_in_thread(server, out)
    _wait_for(lambda: (workspace / "wait-started").exists() and "sid" in out)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    thread.join(30)
    server.proc.wait(30)
    text = "".join(
        c["delta"].get("content") or ""
        for line in out["lines"]
        if line.startswith("data: {")
        for c in json.loads(line[6:]).get("choices", [])
    )
    assert text.endswith("Finished despite the signal.")
    assert _db(server, "SELECT exit_reason FROM turn") == [("completed",)]
    sim.assert_script_done()


def test_drain_timeout_interrupts_with_a_valid_transcript(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server, workspace = _server(servers, tmp_path, COURIER_DRAIN_TIMEOUT_S="1")
    server.start()
    sim.script([_waiting(120)])
    out: dict[str, Any] = {}
    thread = _stream_in_thread(server, out)
    _wait_for(lambda: (workspace / "wait-started").exists() and "sid" in out)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)  # far sooner than the tool's 120 s
    thread.join(10)
    assert _db(server, "SELECT exit_reason FROM turn") == [("interrupted",)]
    roles = _db(server, "SELECT role, is_error FROM message ORDER BY id")
    assert roles == [("user", 0), ("assistant", 0), ("tool", 1)]
    # No lease is left held: the next process serves the session at once.
    assert _db(server, "SELECT COUNT(*) FROM session WHERE lease IS NOT NULL") == [(0,)]


def test_restart_after_kill_marks_the_turn_interrupted(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server, workspace = _server(servers, tmp_path)
    server.start()
    sim.script([_waiting(120)])
    out: dict[str, Any] = {}
    thread = _stream_in_thread(server, out)
    _wait_for(lambda: (workspace / "wait-started").exists() and "sid" in out)
    server.kill()
    thread.join(10)
    assert _db(server, "SELECT exit_reason FROM turn") == [(None,)]
    server.start()
    sid = out["sid"]
    turns = httpx.get(
        f"{server.base_url}/v1/sessions/{sid}/turns", headers=server.headers()
    ).json()["data"]
    assert [(t["status"], t["exit_reason"]) for t in turns] == [("finished", "interrupted")]
    # Repaired at startup, before any request: the open call has its synthetic result.
    rows = _db(server, "SELECT role, content FROM message ORDER BY id")
    assert [r[0] for r in rows] == ["user", "assistant", "tool"]
    assert "interrupted" in rows[2][1]
    assert _db(server, "SELECT COUNT(*) FROM session WHERE lease IS NOT NULL") == [(0,)]
