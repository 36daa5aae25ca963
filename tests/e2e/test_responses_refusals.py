"""A bad Responses request is refused before anything is stored: continuing an older
response forks its session, and a request the translation refuses must not leave a fork
behind (the refusal names the Responses field, at the source)."""

from __future__ import annotations

import sqlite3
from typing import Any

import httpx

from tests.support.server import Server
from tests.support.sim import Simulator
from tests.support.spec import validate


def _post(server: Server, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/responses",
        json={"model": "courier", **body},
        headers=server.headers(),
        timeout=30,
    )


def _sessions(server: Server) -> int:
    with sqlite3.connect(server.data_dir / "courier.db") as db:
        count: int = db.execute("SELECT count(*) FROM session").fetchone()[0]
    return count


def test_a_bad_continuation_of_an_older_response_forks_nothing(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "one"}}, {"reply": {"text": "two"}}])
    first = _post(server, {"input": "first"}).json()["id"]
    assert _post(server, {"input": "second", "previous_response_id": first}).status_code == 200
    before = _sessions(server)
    # Continuing the older response would fork its session; the request is refused first.
    for bad, param in (
        ({"tools": [{"type": "function", "name": "no spaces allowed"}]}, "tools[0].name"),
        ({"reasoning": {"effort": "maximum"}}, "reasoning.effort"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format"),
    ):
        resp = _post(server, {"input": "third", "previous_response_id": first, **bad})
        assert resp.status_code == 400, resp.text
        validate("ErrorResponse", resp.json())
        assert resp.json()["error"]["param"] == param
    assert _sessions(server) == before
    sim.assert_script_done()
