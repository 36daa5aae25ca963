"""Compaction and pruning through the real server against the simulator."""

from __future__ import annotations

import json
import sqlite3
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx

from app.simulator import anthropic_wire
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

SUMMARISER = "You write compact, faithful working notes"


def _turn(server: Server, sid: str | None, text: str) -> httpx.Response:
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return resp


def _read_turn(n: int) -> list[dict[str, Any]]:
    return [
        {"reply": {"tool_calls": [{"name": "read_file", "arguments": {"path": f"f{n % 4}.txt"}}]}},
        {"reply": {"text": f"Read part {n}."}},
    ]


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(4):
        (ws / f"f{i}.txt").write_text(f"file {i} " + ("lorem ipsum dolor sit amet " * 300))
    return ws


def _db(server: Server) -> sqlite3.Connection:
    return sqlite3.connect(server.data_dir / "courier.db")


def test_overflow_compacts_and_retries(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server = servers(
        "anthropic",
        COURIER_WORKSPACE=str(_workspace(tmp_path)),
        COURIER_CONTEXT_WINDOW="40000",
        COURIER_MAX_OUTPUT_TOKENS="1000",
        COURIER_COMPACTION_THRESHOLD="1.0",
    )
    sid = None
    for n in range(8):
        sim.script(_read_turn(n))
        sid = _turn(server, sid, f"read part {n}").headers["x-session-id"]
    sim.assert_script_done()
    # The upstream's real window is smaller than configured: the next call overflows.
    sim.configure(context_window=16_000)
    sim.script(
        [
            {"reply": {"text": "never sent: this step is used up by the overflow"}},
            {"expect": {"system_contains": SUMMARISER}, "reply": {"text": "## Goal\n- read"}},
            {"expect": {"last_user_contains": "what now"}, "reply": {"text": "recovered"}},
        ]
    )
    resp = _turn(server, sid, "what now?")
    assert resp.json()["choices"][0]["message"]["content"] == "recovered"
    sim.assert_script_done()
    con = _db(server)
    outcomes = [r[0] for r in con.execute("SELECT outcome FROM api_call ORDER BY id")]
    assert outcomes[-3:] == ["context_overflow", "ok", "ok"]
    (compactions,) = con.execute("SELECT compactions FROM session").fetchone()
    assert compactions == 1
    breaks = [r[0] for r in con.execute("SELECT cache_break FROM api_call ORDER BY id")]
    assert breaks[-1] == "compaction"


def test_prefix_stability_across_a_compaction(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server = servers(
        "anthropic",
        COURIER_WORKSPACE=str(_workspace(tmp_path)),
        COURIER_CONTEXT_WINDOW="24000",
        COURIER_MAX_OUTPUT_TOKENS="1000",
    )
    # No script: the simulator's demo policy reads the named file, answers from it,
    # and answers a summary request like any question, wherever compaction fires.
    sid = None
    for n in range(16):
        sid = _turn(server, sid, f"please read f{n % 4}.txt").headers["x-session-id"]
    server.stop()
    bodies = [json.loads(r["body"]) for r in sim.requests() if r["path"] == "/v1/messages"]
    con = sqlite3.connect(server.data_dir / "courier.db")
    ledger = [r[0] for r in con.execute("SELECT cache_break FROM api_call ORDER BY id")]
    (compactions,) = con.execute("SELECT compactions FROM session").fetchone()
    assert len(bodies) == len(ledger) and compactions >= 1
    main = [
        (body, mark)
        for body, mark in zip(bodies, ledger, strict=True)
        if SUMMARISER not in json.dumps(body.get("system", ""))
    ]
    assert len(main) == len(bodies) - compactions
    for (prev, _), (cur, mark) in pairwise(main):
        before = anthropic_wire.parse(prev)
        after = anthropic_wire.parse(cur)
        last = max(b.segment_index for b in before.breakpoints)
        kept = [(s.header, s.body) for s in after.segments[: last + 1]]
        stable = kept == [(s.header, s.body) for s in before.segments[: last + 1]]
        # The only moves are the marked compactions, and stability resumes after each.
        assert stable == (mark != "compaction"), mark
    assert [mark for _, mark in main].count("compaction") == compactions


def test_idle_resume_prunes_a_cold_prefix(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    server = servers(
        "anthropic",
        COURIER_WORKSPACE=str(_workspace(tmp_path)),
        COURIER_CONTEXT_WINDOW="200000",
    )
    sid = None
    for n in range(10):
        sim.script(_read_turn(n))
        sid = _turn(server, sid, f"read part {n}").headers["x-session-id"]
    con = _db(server)
    (warm_prompt,) = con.execute(
        "SELECT input_tokens + cache_read_tokens + cache_write_tokens FROM api_call "
        "ORDER BY id DESC LIMIT 1"
    ).fetchone()
    # Come back after lunch: longer than the 5 minute cache TTL, on both clocks.
    con.execute("UPDATE session SET last_call_at = ?", (time.time() - 400,))
    con.commit()
    sim.advance_clock(400)
    sim.script([{"reply": {"text": "welcome back"}}])
    _turn(server, sid, "I am back")
    row = con.execute(
        "SELECT cache_break, input_tokens + cache_read_tokens + cache_write_tokens, "
        "cache_read_tokens FROM api_call ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert row[0] == "prune"
    assert row[1] < warm_prompt / 2  # old tool output went, the prefix was cold anyway
    assert row[2] == 0
    # Pruned output is one recall away.
    stub = con.execute("SELECT api_content FROM message WHERE kind = 'pruned' LIMIT 1").fetchone()
    assert "recall(message_id=" in stub[0]
