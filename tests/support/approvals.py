"""Drive a turn that waits for a human: run it in a thread, find its approval, decide it."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.server import Server
from tests.support.sim import Simulator


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": args}


@dataclass
class BackgroundTurn:
    """A chat request running in a thread, so the test can act while it waits."""

    server: Server
    text: str
    headers: dict[str, str] = field(default_factory=dict)
    stream: bool = False
    model: str = "courier"
    key: str | None = None
    """Send this key instead of the server's default one."""
    response: httpx.Response | None = None
    lines: list[str] = field(default_factory=list)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> BackgroundTurn:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        body = {
            "model": self.model,
            "stream": self.stream,
            "messages": [{"role": "user", "content": self.text}],
        }
        url = f"{self.server.base_url}/v1/chat/completions"
        headers = self.server.headers(**self.headers)
        if self.key is not None:
            headers["Authorization"] = f"Bearer {self.key}"
        try:
            if self.stream:
                with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as resp:
                    self.response = resp
                    for line in resp.iter_lines():
                        self.lines.append(line)  # visible to the test while the turn runs
            else:
                self.response = httpx.post(url, json=body, headers=headers, timeout=60)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self, timeout: float = 60) -> httpx.Response:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the turn did not finish"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def pending(server: Server, key: str | None = None, timeout: float = 30) -> list[dict[str, Any]]:
    """Wait until at least one approval is pending and return them all."""
    headers = {"Authorization": f"Bearer {key or server.api_key}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = httpx.get(
            f"{server.base_url}/v1/approvals", params={"status": "pending"}, headers=headers
        )
        assert resp.status_code == 200, resp.text
        if data := resp.json()["data"]:
            return list(data)
        time.sleep(0.05)
    raise AssertionError("no approval became pending")


def wait_pending_count(server: Server, count: int, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pending(server, timeout=timeout)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} approvals became pending")


def decide(
    server: Server, approval_id: str, decision: str, key: str | None = None
) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/approvals/{approval_id}",
        json={"decision": decision},
        headers={"Authorization": f"Bearer {key or server.api_key}"},
    )


def tool_results(sim: Simulator, request_index: int = -1) -> list[str]:
    body = json.loads(sim.requests()[request_index]["body"])
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]
