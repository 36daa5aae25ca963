"""Upstream connections are reused, and the pool never silently caps the turn limit.

Counted, not timed: the simulator reports how many distinct TCP connections carried a
model request, so a client that drops its connection after every stream shows up as one
new connection per request.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.server import Server
from tests.support.sim import Simulator


def _turn(server: Server, *, stream: bool) -> None:
    body: dict[str, Any] = {
        "model": "courier",
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    }
    url = f"{server.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=server.headers(), timeout=30) as resp:
        text = resp.read().decode()
    assert resp.status_code == 200, text
    assert '"error"' not in text


def test_no_new_upstream_connection_per_request_after_warm_up(
    server: Server, sim: Simulator
) -> None:
    steps: list[dict[str, Any]] = [{"reply": {"text": "warm"}}] * 2
    steps += [{"reply": {"text": "one two three four five"}}] * 6
    call = {"name": "todo", "arguments": {"action": "add", "items": ["x"]}}
    steps += [{"reply": {"tool_calls": [call]}}, {"reply": {"text": "done"}}]
    sim.script(steps)
    _turn(server, stream=True)
    _turn(server, stream=False)
    warm = sim.connections()
    assert warm >= 1
    for _ in range(3):
        _turn(server, stream=True)
        _turn(server, stream=False)
    _turn(server, stream=True)  # a tool turn: two upstream calls
    sim.assert_script_done()
    # Before the fix every streamed call ended at [DONE] with the body unread, so httpx
    # discarded the connection: 3 + 2 new connections here.
    assert sim.connections() == warm
