"""The session's tool snapshot is its allowlist: a tool it was not given never runs.

The model is scripted to call `memory`, a registered tool outside the profile's toolsets
(so absent from the session's snapshot). It must get an unknown-tool result and nothing
may be written, over real HTTP against the real server.
"""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


@pytest.fixture(scope="module")
def narrow(
    module_servers: ServerFactory, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    config = tmp_path_factory.mktemp("allowlist") / "courier.toml"
    config.write_text(
        "[[profiles]]\n"
        'name = "narrow"\n'
        f'base_url = "{simulator.base_url}/v1"\n'
        'api_key = "sim-upstream-key"\n'
        'toolsets = ["core"]\n'
    )
    return module_servers(COURIER_CONFIG=str(config))


def test_a_tool_outside_the_snapshot_never_runs(narrow: Server, sim: Simulator) -> None:
    call = {"name": "memory", "arguments": {"action": "add", "text": "leaked note"}}
    sim.script(
        [
            {"expect": {"has_tools": True}, "reply": {"tool_calls": [call]}},
            {"reply": {"text": "ok"}},
        ]
    )
    response = httpx.post(
        f"{narrow.base_url}/v1/chat/completions",
        json={"model": "narrow", "messages": [{"role": "user", "content": "remember this"}]},
        headers=narrow.headers(),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    sim.assert_script_done()
    first, second = [json.loads(r["body"]) for r in sim.requests("/v1/chat/completions")]
    offered = {t["function"]["name"] for t in first["tools"]}
    assert "memory" not in offered and "session_search" in offered
    result = second["messages"][-1]
    assert result["role"] == "tool"
    assert "unknown tool" in result["content"]
    with sqlite3.connect(narrow.data_dir / "courier.db") as db:
        assert db.execute("SELECT count(*) FROM memory").fetchone() == (0,)
