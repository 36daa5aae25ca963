"""A warm server sends the upstream the same bytes a cold one builds from the database.

One session lives through everything that rewrites or extends its log in place: a
regenerate (the diverged answer is retracted), a kill -9 during a tool call and the
repair after restart, parallel tool results, an image, and a compaction. The server keeps
the session's projection and encodings in memory throughout (and, as in the whole suite,
checks them against a full reprojection on every call: a drift would fail a turn here).
At the end its database is copied to a second, cold server: for the same next request,
both must send the upstream byte-identical bodies.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4"
        "890000000d4944415478da63f8cfc0f01f0005000201a5d8e4a80000000049454e44ae426082"
    )
).decode()


def _post(server: Server, body: dict[str, Any], sid: str | None = None) -> httpx.Response:
    headers = server.headers(**({"X-Session-Id": sid} if sid else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", **body},
        headers=headers,
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return resp


def _say(server: Server, sid: str, content: Any) -> str:
    resp = _post(server, {"messages": [{"role": "user", "content": content}]}, sid)
    return str(resp.json()["choices"][0]["message"]["content"])


def _last_body(sim: Simulator) -> str:
    return str(sim.requests("/v1/chat/completions")[-1]["body"])


def _session_row(db: Path, sid: str) -> tuple[int, int]:
    con = sqlite3.connect(db)
    try:
        compactions, retracted = con.execute(
            "SELECT s.compactions, (SELECT count(*) FROM message m WHERE m.session_id = s.id "
            "AND m.active = 0 AND m.compacted = 0) FROM session s WHERE s.id = ?",
            (sid,),
        ).fetchone()
    finally:
        con.close()
    return int(compactions), int(retracted)


def _kill_during_wait(server: Server, sim: Simulator, sid: str, workspace: Path) -> None:
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

    def turn() -> None:
        try:
            with httpx.stream(
                "POST",
                f"{server.base_url}/v1/chat/completions",
                json={
                    "model": "courier",
                    "stream": True,
                    "messages": [{"role": "user", "content": "please wait"}],
                },
                headers=server.headers(**{"X-Session-Id": sid}),
                timeout=30,
            ) as resp:
                for _ in resp.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # the server dies under us: that is the point

    worker = threading.Thread(target=turn, daemon=True)
    worker.start()
    deadline = time.monotonic() + 20
    while not (workspace / "wait-started").exists():
        assert time.monotonic() < deadline, "the wait tool never started"
        time.sleep(0.05)
    server.kill()
    worker.join(10)
    server.start()
    sim.reset()  # back to the deterministic demo policy


def _warm_and_cold(
    servers: ServerFactory, warm: Server, sim: Simulator, sid: str, cold_dir: Path
) -> tuple[str, str]:
    """The upstream body of the same next request from the warm server and from a cold
    one started on a copy of the database as it stands before that request."""
    cold_dir.mkdir()
    source = sqlite3.connect(warm.data_dir / "courier.db")
    copy = sqlite3.connect(cold_dir / "courier.db")
    try:
        source.backup(copy)
    finally:
        copy.close()
        source.close()
    _say(warm, sid, "and what now?")
    sent_warm = _last_body(sim)
    cold = servers.like(warm, data_dir=cold_dir)
    _say(cold, sid, "and what now?")
    sent_cold = _last_body(sim)
    cold.stop()
    return sent_warm, sent_cold


def test_a_warm_server_sends_what_a_cold_one_rebuilds(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(4):
        (workspace / f"f{i}.txt").write_text(f"file {i} " + "lorem ipsum dolor sit amet " * 300)
    warm = servers(
        COURIER_WORKSPACE=str(workspace),
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_CONTEXT_WINDOW="16000",
        COURIER_MAX_OUTPUT_TOKENS="1000",
        COURIER_COMPACTION_THRESHOLD="0.5",
    )
    # A regenerate: the same history twice retracts the first answer to it.
    u1 = {"role": "user", "content": "hello there"}
    first = _post(warm, {"messages": [u1]})
    sid = first.headers["x-session-id"]
    a1 = {"role": "assistant", "content": first.json()["choices"][0]["message"]["content"]}
    u2 = {"role": "user", "content": "tell me more"}
    assert _post(warm, {"messages": [u1, a1, u2]}).headers["x-session-id"] == sid
    assert _post(warm, {"messages": [u1, a1, u2]}).headers["x-session-id"] == sid
    db = warm.data_dir / "courier.db"
    assert _session_row(db, sid)[1] >= 1  # something was retracted
    early_warm, early_cold = _warm_and_cold(servers, warm, sim, sid, tmp_path / "cold1")
    assert early_warm == early_cold
    assert "tell me more" in early_warm

    _kill_during_wait(warm, sim, sid, workspace)
    _say(warm, sid, "still there?")  # closes the interrupted call, then answers
    _say(warm, sid, "read f0.txt and f1.txt")  # two results in one transaction
    for n in range(12):
        if _session_row(db, sid)[0] >= 1:
            break
        _say(warm, sid, f"read f{(n + 2) % 4}.txt")
    assert _session_row(db, sid)[0] >= 1, "the session never compacted"
    # It grows on after the compaction, an image and a tool result among the rows.
    picture = [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    _say(warm, sid, picture)
    _say(warm, sid, "read f3.txt")

    sent_warm, sent_cold = _warm_and_cold(servers, warm, sim, sid, tmp_path / "cold2")
    warm.stop()
    assert sent_warm == sent_cold
    messages = json.loads(sent_warm)["messages"]
    roles = {m["role"] for m in messages}
    assert {"system", "user", "assistant", "tool"} <= roles
    assert any(isinstance(m["content"], list) for m in messages if m["role"] == "user")
