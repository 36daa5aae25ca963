"""JavaScript clients that install from npm, run as real subprocesses against Courier.

The Vercel AI SDK's `openai("courier")` speaks the Responses API. `make test` installs the
npm dependencies when node is present; without node (or without them) these tests skip
and say why, rather than fail on a machine that cannot run them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

import pytest

from tests.support.paths import NODE_DIR
from tests.support.server import Server
from tests.support.sim import Simulator

NODE = shutil.which("node")

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed; the npm client tests need it"),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "ai").is_dir(),
        reason="npm dependencies missing: run `make node-deps` (or `npm ci` in tests/node)",
    ),
]


def _run(server: Server, mode: str) -> dict[str, Any]:
    assert NODE is not None
    env = {
        **os.environ,
        "COURIER_BASE_URL": f"{server.base_url}/v1",
        "COURIER_API_KEY": server.api_key,
    }
    proc = subprocess.run(
        [NODE, "vercel_ai.mjs", mode],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_vercel_generate_text(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Hello from Courier."}}])
    out = _run(server, "generate")
    assert out["text"] == "Hello from Courier."
    assert out["finishReason"] == "stop"
    assert out["usage"]["inputTokens"] > 0 and out["usage"]["outputTokens"] > 0
    assert out["responseId"].startswith("resp_")
    sim.assert_script_done()


def test_vercel_stream_text(server: Server, sim: Simulator) -> None:
    sim.configure(tokens_per_second=50)  # paced, so the deltas arrive apart
    sim.script([{"reply": {"text": "streamed to the vercel sdk"}}])
    out = _run(server, "stream")
    assert out["text"] == "streamed to the vercel sdk" == "".join(out["deltas"])
    assert len(out["deltas"]) > 1
    assert out["finishReason"] == "stop" and out["usage"]["outputTokens"] > 0


def test_vercel_previous_response_id(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "Noted."}},
            {"expect": {"last_user_contains": "which word"}, "reply": {"text": "tangerine"}},
        ]
    )
    out = _run(server, "continue")
    assert out == {"first": "Noted.", "second": "tangerine", "firstId": out["firstId"]}
    said = json.dumps(json.loads(sim.requests()[-1]["body"])["messages"])
    assert "remember the word tangerine" in said


def test_vercel_tool_round_trip(server: Server, sim: Simulator) -> None:
    """The SDK runs its tool locally and resends the whole history with the result."""
    sim.script(
        [
            {
                "expect": {"has_tools": True},
                "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
            },
            {
                "expect": {"last_tool_result_contains": "sunny in Oslo"},
                "reply": {"text": "It is sunny."},
            },
        ]
    )
    out = _run(server, "tools")
    assert out == {"text": "It is sunny.", "steps": 2, "calls": [["get_weather", {"city": "Oslo"}]]}
    sim.assert_script_done()


def test_vercel_generate_object(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": '{"city": "Oslo", "sunny": true}'}}])
    out = _run(server, "object")
    assert out == {"object": {"city": "Oslo", "sunny": True}}
    sent = json.loads(sim.requests()[-1]["body"])["response_format"]
    assert sent["type"] == "json_schema"
