"""Hardening over real HTTP: no single tool call or request body can freeze the server.

One server for the module. Each test runs a hostile case while a thread probes /health on
a kept-alive connection; the issue demands /health answer within 100 ms throughout, and
that bound is asserted per probe (generous against the seconds the old code blocked for).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, sim_env
from tests.support.sim import Simulator

URL = "/v1/chat/completions"
HEALTH_BOUND_S = 0.1


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("hardening") / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(scope="module")
def server(
    simulator: Simulator, workspace: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = sim_env(simulator.base_url, COURIER_WORKSPACE=str(workspace))
    srv = Server(data_dir=tmp_path_factory.mktemp("hardening-data"), env=env).start()
    # One plain turn first: the first request pays one-off costs (lazy imports, the first
    # upstream connection) on the loop that are not what these tests are about.
    simulator.script([{"reply": {"text": "warm"}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "warm up"}]}
    assert _chat(srv, body).status_code == 200
    yield srv
    srv.stop()


class HealthProbe:
    """Polls /health in a thread; `worst` is the slowest answer seen, `count` how many."""

    def __init__(self, server: Server) -> None:
        self.url = f"{server.base_url}/health"
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as client:
            client.get(self.url)  # connect once: the probe measures the server, not connect()
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.get(self.url).status_code == 200
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                self.latencies.append(time.perf_counter() - started)
                if not ok:
                    self.failures.append("non-200")
                self._stop.wait(0.02)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def assert_responsive(self, minimum_probes: int = 5) -> None:
        assert not self.failures, self.failures[:5]
        assert len(self.latencies) >= minimum_probes, self.latencies
        worst = max(self.latencies)
        shown = [round(x * 1000) for x in self.latencies]
        assert worst < HEALTH_BOUND_S, f"/health took {worst * 1000:.0f} ms: {shown}"


def _chat(server: Server, body: Any, **headers: str) -> httpx.Response:
    kwargs: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx.post(
        f"{server.base_url}{URL}", headers=server.headers(**headers), timeout=120, **kwargs
    )


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:2000]
    body = resp.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


# ------------------------------------------------------------------- catastrophic regex


def test_catastrophic_regex_does_not_freeze_the_server(
    server: Server, sim: Simulator, workspace: Path
) -> None:
    # 27 a's and a '!' blocked Python's re for 15-18 s; 40 would take days.
    (workspace / "evil.txt").write_text("a" * 40 + "!\n" + "a" * 5 + "\n")
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        {
                            "name": "search_files",
                            "arguments": {"pattern": "(a+)+$", "path": "evil.txt"},
                            "id": "call_re",
                        }
                    ]
                }
            },
            {"expect": {"last_tool_result_contains": "evil.txt:2"}, "reply": {"text": "found"}},
        ]
    )
    with HealthProbe(server) as probe:
        resp = _chat(server, {"model": "courier", "messages": [{"role": "user", "content": "go"}]})
        time.sleep(0.3)  # a few probes after the call as well
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "found"
    sim.assert_script_done()
    probe.assert_responsive(minimum_probes=3)
    last = json.loads(sim.requests()[-1]["body"])["messages"][-1]
    assert last["role"] == "tool" and "evil.txt:1" not in last["content"]  # ends in '!'
