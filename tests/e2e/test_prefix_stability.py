"""The cache contract end to end: over a 30-turn tool-heavy session, every request starts
with the previous request's bytes up to its last breakpoint, across restarts. The only
allowed exceptions are requests the ledger marks as deliberate cache breaks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx

from app.simulator import anthropic_wire
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

TURNS = 30


def _cached_prefix(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(all canonical segments, the segments up to and including the last breakpoint)."""
    parsed = anthropic_wire.parse(body)
    segments = [f"{s.header}\n{s.body}" for s in parsed.segments]
    if not parsed.breakpoints:
        return segments, []
    last = max(b.segment_index for b in parsed.breakpoints)
    return segments, segments[: last + 1]


def _turn(server: Server, sid: str | None, n: int) -> str:
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": f"step {n}: look"}]},
        headers=headers,
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-session-id"]


def _script(sim: Simulator, turns: range) -> None:
    steps: list[dict[str, Any]] = []
    for n in turns:
        tool = {"name": "read_file", "arguments": {"path": "notes.txt"}}
        if n % 3 == 0:
            tool = {"name": "list_files", "arguments": {"path": "."}}
        steps.append(
            {"expect": {"last_user_contains": f"step {n}:"}, "reply": {"tool_calls": [tool]}}
        )
        steps.append({"reply": {"text": f"Done with step {n}. " + "detail " * 40}})
    sim.script(steps)


def test_prefix_is_stable_across_turns_restarts_and_marked_breaks(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("line\n" * 200)
    server = servers(
        "anthropic",
        start=False,
        COURIER_WORKSPACE=str(workspace),
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
    )
    with_plugin = server.env
    env = {k: v for k, v in with_plugin.items() if k != "COURIER_TOOL_PLUGINS"}
    sim.configure(min_cacheable_tokens=64)
    sid: str | None = None
    phases = [
        (with_plugin, range(1, 11)),
        (with_plugin, range(11, 21)),
        (env, range(21, TURNS + 1)),
    ]
    for phase_env, turns in phases:
        # Each phase restarts the server; the last one without the plugin tool, which
        # forces a tool-snapshot rebuild: the one deliberate break.
        server.env = phase_env
        server.start()
        _script(sim, turns)
        for n in turns:
            sid = _turn(server, sid, n)
        sim.assert_script_done()
        server.stop()

    bodies = [json.loads(r["body"]) for r in sim.requests() if r["path"] == "/v1/messages"]
    con = sqlite3.connect(server.data_dir / "courier.db")
    ledger = con.execute(
        "SELECT cache_break, cache_read_tokens, input_tokens, cache_write_tokens "
        "FROM api_call ORDER BY id"
    ).fetchall()
    assert len(bodies) == len(ledger) == 2 * TURNS
    breaks = [i for i, row in enumerate(ledger) if row[0]]
    assert [ledger[i][0] for i in breaks] == ["tool_snapshot_rebuild"]
    assert breaks == [40]  # the first request after the restart without the plugin

    for i in range(1, len(bodies)):
        _, prev_prefix = _cached_prefix(bodies[i - 1])
        current, _ = _cached_prefix(bodies[i])
        if i in breaks:
            assert current[: len(prev_prefix)] != prev_prefix  # it really did break
            continue
        assert prev_prefix, f"request {i - 1} carried no breakpoint"
        assert current[: len(prev_prefix)] == prev_prefix, f"request {i} moved the prefix"

    # And it pays: the reads come close to the floor, where every token already sent in
    # the previous request is read back and only new tokens are not.
    read = sum(row[1] for row in ledger)
    floor_read = sum(_shared_tokens(bodies[i - 1], bodies[i]) for i in range(1, len(bodies)))
    assert read >= 0.9 * floor_read, (read, floor_read)


def _shared_tokens(previous: dict[str, Any], current: dict[str, Any]) -> int:
    """Tokens of the longest run of leading segments two requests have in common."""
    a = anthropic_wire.parse(previous).segments
    b = anthropic_wire.parse(current).segments
    shared = 0
    for x, y in zip(a, b, strict=False):
        if (x.header, x.body) != (y.header, y.body):
            break
        shared += y.tokens
    return shared
