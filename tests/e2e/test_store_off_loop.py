"""A database that stops taking writes, mid-turn, over HTTP.

The store's writes run on its writer thread: while SQLite's write lock is held by another
process (a stuck writer, a backup), the turn that needs to commit waits there, the server
keeps answering, and when the busy timeout passes the turn ends `persistence_failed`
without running the tool whose intent it could not record (persist before act).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


@pytest.fixture()
def srv(servers: ServerFactory) -> Server:
    return servers()


def _wait_for_turn_row(db: Path, deadline_s: float = 30.0) -> None:
    """The turn's first transaction has landed (a WAL reader never blocks the writer)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            if conn.execute("SELECT count(*) FROM turn").fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the turn never started")


def test_an_unrecordable_intent_ends_the_turn_and_runs_nothing(srv: Server, sim: Simulator) -> None:
    call = {"name": "write_file", "arguments": {"path": "marker.txt", "content": "ran"}}
    # The upstream takes its time, so the lock can be taken after the turn opened.
    sim.script([{"reply": {"tool_calls": [call]}, "fault": {"delay_ms": 3000}}])
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    frames: list[str] = []
    sid: list[str] = []

    def client() -> None:
        url = f"{srv.base_url}/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=srv.headers(), timeout=60) as resp:
            sid.append(resp.headers["x-session-id"])
            frames.extend(line for line in resp.iter_lines() if line.startswith("data: "))

    reader = threading.Thread(target=client)
    reader.start()
    db = srv.data_dir / "courier.db"
    _wait_for_turn_row(db)
    holder = sqlite3.connect(db, isolation_level=None, timeout=30)
    try:
        holder.execute("BEGIN IMMEDIATE")
        # The server stays responsive while its writer waits on the lock.
        assert httpx.get(f"{srv.base_url}/health", timeout=30).status_code == 200
        reader.join(timeout=60)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert not reader.is_alive()
    errors = [json.loads(f[6:])["error"] for f in frames if '"error"' in f]
    assert [e["code"] for e in errors] == ["persistence_failed"], frames
    assert frames[-1] == "data: [DONE]"
    # Persist before act: the tool whose call could not be recorded never ran.
    assert not list((srv.data_dir / "workspaces").rglob("marker.txt"))
    # Once the lock is free the turn's close lands, with its reason.
    url = f"{srv.base_url}/v1/sessions/{sid[0]}/turns"
    end = time.monotonic() + 30
    while time.monotonic() < end:
        turns = httpx.get(url, headers=srv.headers(), timeout=10).json()["data"]
        if turns and turns[0].get("exit_reason"):
            break
        time.sleep(0.1)
    assert turns[0]["exit_reason"] == "persistence_failed"
    sim.assert_script_done()


def test_a_turn_the_database_will_not_open_is_a_retryable_503(srv: Server) -> None:
    holder = sqlite3.connect(srv.data_dir / "courier.db", isolation_level=None, timeout=30)
    try:
        holder.execute("BEGIN IMMEDIATE")  # past the server's 5 s busy timeout
        body = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}
        resp = httpx.post(
            f"{srv.base_url}/v1/chat/completions", json=body, headers=srv.headers(), timeout=60
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "storage_unavailable"
    assert resp.headers["x-should-retry"] == "true" and resp.headers["retry-after"] == "1"
    with sqlite3.connect(srv.data_dir / "courier.db") as conn:
        assert conn.execute("SELECT count(*) FROM session WHERE lease IS NOT NULL").fetchone() == (
            0,
        )
