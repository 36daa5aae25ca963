"""Background responses (OpenAI's `background: true`) over HTTP, with the official SDK,
against the real server and the simulator: create, poll, cancel, resume the event stream
by sequence number (also after a restart), and what a drain or a crash leaves behind.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _server(servers: ServerFactory, tmp_path: Path, **extra: str) -> tuple[Server, Path]:
    """Unstarted, with the test tool that waits (so a test can act while it runs)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    server = servers(
        start=False,
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_WORKSPACE=str(workspace),
        **extra,
    )
    return server, workspace


def _waiting(seconds: float, text: str = "Waiting.") -> dict[str, Any]:
    call = {"name": "wait", "arguments": {"seconds": seconds}, "id": "w_bg"}
    return {"reply": {"text": text, "tool_calls": [call]}}


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def test_a_drained_streamed_response_ends_failed_not_completed(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    """A turn cut off by the drain ends `interrupted`: half an answer is not `completed`."""
    server, workspace = _server(servers, tmp_path, COURIER_DRAIN_TIMEOUT_S="1")
    server.start()
    sim.script([_waiting(120)])
    out: dict[str, Any] = {}

    def run() -> None:
        body = {"model": "courier", "input": "wait", "stream": True}
        with httpx.stream(
            "POST",
            f"{server.base_url}/v1/responses",
            json=body,
            headers=server.headers(),
            timeout=60,
        ) as resp:
            out["lines"] = lines = []
            try:
                for line in resp.iter_lines():
                    lines.append(line)
            except httpx.HTTPError as exc:
                out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    _wait_for(lambda: (workspace / "wait-started").exists())
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)
    thread.join(10)
    # The stream itself is cut by uvicorn before the drain; what was stored must not
    # say `completed` for half an answer.
    created = _events(out["lines"])[0]["response"]["id"]
    server.start()
    client = OpenAI(base_url=f"{server.base_url}/v1", api_key=server.api_key, max_retries=0)
    stored = client.responses.retrieve(created)
    assert stored.status == "failed"
    assert stored.error is not None and stored.error.code == "server_error"
    assert "interrupted" in stored.error.message
