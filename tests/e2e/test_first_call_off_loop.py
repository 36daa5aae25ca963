"""A long session's first call keeps its passes over every row off the event loop.

Counted, not timed: the server counts each pass over more than 64 rows of one session
(reading the log, sizing it, projecting it, planning a compaction, encoding the upstream
body) by the thread it ran on (`courier_long_passes_total{work, thread}`), and read over
HTTP. On the loop, each such pass of a 10,000-message request held every other stream
silent for tens of milliseconds (`benchmarks/loop_stall.py`); a short session's passes
must not pay for a thread hop at all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

METRICS_KEY = "metrics-key-0123456789abcdef"
_PASS = re.compile(r'^courier_long_passes_total\{thread="(\w+)",work="(\w+)"\} (\S+)$')
SUMMARISER = "You write compact, faithful working notes"


def _passes(server: Server) -> dict[tuple[str, str], int]:
    """(work, thread) -> long passes the server has counted so far."""
    body = httpx.get(
        f"{server.base_url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_KEY}"},
        timeout=10,
    ).text
    found: dict[tuple[str, str], int] = {}
    for line in body.splitlines():
        if (match := _PASS.match(line)) is not None:
            found[(match[2], match[1])] = int(float(match[3]))
    return found


def _delta(after: dict[tuple[str, str], int], before: dict[tuple[str, str], int]) -> dict[str, int]:
    """The passes counted in between, as "work@thread" -> count (zeros left out)."""
    return {
        f"{work}@{thread}": n - before.get((work, thread), 0)
        for (work, thread), n in after.items()
        if n - before.get((work, thread), 0)
    }


def _history(pairs: int, words: int = 1) -> list[dict[str, str]]:
    filler = " ".join(["lorem ipsum"] * words)
    messages: list[dict[str, str]] = []
    for i in range(pairs):
        messages.append({"role": "user", "content": f"question {i}: {filler}"})
        messages.append({"role": "assistant", "content": f"answer {i}: {filler}"})
    messages.append({"role": "user", "content": "and finally?"})
    return messages


def _chat(server: Server, messages: list[dict[str, str]], sid: str | None = None) -> str:
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": messages},
        headers=headers,
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-session-id"]


def _sent(sim: Simulator) -> list[dict[str, Any]]:
    """The messages of the last chat request the upstream received."""
    body = json.loads(sim.requests("/v1/chat/completions")[-1]["body"])
    messages: list[dict[str, Any]] = body["messages"]
    return messages


def _start(servers: ServerFactory, data_dir: Path | None = None, **extra: str) -> Server:
    return servers(data_dir=data_dir, COURIER_METRICS_API_KEY=METRICS_KEY, **extra)


def test_a_long_first_call_sizes_projects_and_encodes_on_a_worker(
    sim: Simulator, servers: ServerFactory
) -> None:
    server = _start(servers)
    sim.script([{"reply": {"text": "short"}}])
    before = _passes(server)
    _chat(server, [{"role": "user", "content": "hi"}])
    # A short session costs no hop: nothing it does is a long pass.
    assert _delta(_passes(server), before) == {}

    sim.script([{"reply": {"text": "long"}}])
    before = _passes(server)
    history = _history(100)
    sid = _chat(server, history)
    # Every pass over the 201 rows ran on a worker; the log was never read (kept
    # from the session's creation), and the loop made no long pass at all.
    assert _delta(_passes(server), before) == {
        "size@worker": 1,
        "project@worker": 1,
        "encode@worker": 1,
    }
    sent = _sent(sim)
    assert [m["content"] for m in sent if m["role"] != "system"] == [m["content"] for m in history]

    # The next call of the session resumes from what the first one kept.
    sim.script([{"reply": {"text": "more"}}])
    before = _passes(server)
    _chat(server, [{"role": "user", "content": "one more"}], sid)
    assert _delta(_passes(server), before) == {}
    sim.assert_script_done()


def test_a_restarted_server_reads_a_long_log_on_a_worker(
    sim: Simulator, servers: ServerFactory
) -> None:
    server = _start(servers)
    sim.script([{"reply": {"text": "long"}}])
    sid = _chat(server, _history(100))
    server.stop()
    server = _start(servers, server.data_dir)
    sim.script([{"reply": {"text": "after the restart"}}])
    before = _passes(server)
    _chat(server, [{"role": "user", "content": "still there?"}], sid)
    # Nothing is kept after a restart: the 203 rows are read, sized, projected and
    # encoded again, on workers (the turn's opening, on the store's writer thread,
    # also reads and folds them to find open tool calls), never on the loop.
    passes = _delta(_passes(server), before)
    assert {key.partition("@")[0] for key in passes} == {"load", "size", "project", "encode"}
    assert not [key for key in passes if key.endswith("@loop")], passes
    sent = [m["content"] for m in _sent(sim) if m["role"] != "system"]
    assert len(sent) == 203 and sent[-3:] == ["and finally?", "long", "still there?"]
    sim.assert_script_done()


def test_a_long_first_call_plans_its_compaction_on_a_worker(
    sim: Simulator, servers: ServerFactory
) -> None:
    # 301 messages of ~45 tokens cross the threshold of a 16K window on the first call.
    server = _start(servers, COURIER_CONTEXT_WINDOW="16000", COURIER_MAX_OUTPUT_TOKENS="1000")
    sim.script(
        [
            {"expect": {"system_contains": SUMMARISER}, "reply": {"text": "## Goal\n- ask"}},
            {"expect": {"last_user_contains": "and finally"}, "reply": {"text": "done"}},
        ]
    )
    before = _passes(server)
    _chat(server, _history(150, words=16))
    sim.assert_script_done()
    passes = _delta(_passes(server), before)
    assert not [key for key in passes if key.endswith("@loop")], passes
    # The plan read all 301 rows; the compacted log (summary and tail, still long) was
    # read back and sized on a worker too.
    assert passes["compact@worker"] == 1, passes
    assert passes["load@worker"] == 1, passes
    assert passes["size@worker"] >= 2, passes
