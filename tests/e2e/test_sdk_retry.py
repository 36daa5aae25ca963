"""An SDK's automatic retry of a non-streamed request costs one turn, not two.

The openai SDK gives up on a slow request after its read timeout, hangs up and sends the
same body again (`x-stainless-retry-count: 1`), without an Idempotency-Key. The first
attempt's turn must wait for that retry instead of being cancelled at the hang-up: a
cancelled turn is never a twin, so the retry would run every upstream call again.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import Any

import httpx
import openai

from tests.support.server import Server
from tests.support.sim import Simulator

TOOL_TURN: list[dict[str, Any]] = [
    {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
    # The answer after the tool comes later than the SDK waits (its timeout is 1 s).
    {"fault": {"delay_ms": 1500}, "reply": {"text": "Listed, once."}},
]
SPARE = [{"reply": {"text": "a second turn ran"}}] * 4
"""Left unread when the turn ran once; a second run would answer with these."""


def _sessions(server: Server) -> int:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return int(con.execute("SELECT count(*) FROM session").fetchone()[0])
    finally:
        con.close()


def _turns(server: Server) -> list[tuple[str, str | None]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return list(con.execute("SELECT id, exit_reason FROM turn ORDER BY started_at"))
    finally:
        con.close()


def test_an_sdk_retry_after_a_timeout_gets_the_first_turns_answer(
    server: Server, sim: Simulator
) -> None:
    sim.script(TOOL_TURN + SPARE)
    sessions_before = _sessions(server)
    attempts: list[str | None] = []
    client = openai.OpenAI(
        base_url=f"{server.base_url}/v1", api_key=server.api_key, timeout=1.0, max_retries=2
    )
    client._client.event_hooks["request"].append(
        lambda request: attempts.append(request.headers.get("x-stainless-retry-count"))
    )
    answer = client.chat.completions.create(
        model="courier", messages=[{"role": "user", "content": "list my files"}]
    )
    assert attempts[:2] == ["0", "1"]  # the SDK did time out and retry
    assert answer.choices[0].message.content == "Listed, once."
    assert len(sim.requests("/v1/chat/completions")) == 2  # one clean tool turn's calls
    assert _sessions(server) == sessions_before + 1


def test_a_request_without_the_sdk_header_is_cancelled_at_its_hangup(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"fault": {"delay_ms": 1500}, "reply": {"text": "nobody hears this"}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "slow, plain"}]}
    with contextlib.suppress(httpx.ReadTimeout):  # the client gives up, without an SDK
        httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json=body,
            headers=server.headers(),
            timeout=0.5,
        )
    waits = 50
    while waits and _turns(server)[-1][1] is None:
        threading.Event().wait(0.1)
        waits -= 1
    assert _turns(server)[-1][1] == "cancelled"
