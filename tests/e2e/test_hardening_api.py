"""Hardening over real HTTP: no single tool call or request body can freeze the server.

One server for the module. Each test runs a hostile case while a thread probes /health on
a kept-alive connection; the issue demands /health answer within 100 ms throughout, and
that bound is asserted per probe (generous against the seconds the old code blocked for).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"
HEALTH_BOUND_S = 0.1


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("hardening") / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, simulator: Simulator, workspace: Path) -> Server:
    srv = module_servers(COURIER_WORKSPACE=str(workspace))
    # One plain turn first: the first request pays one-off costs (lazy imports, the first
    # upstream connection) on the loop that are not what these tests are about.
    simulator.script([{"reply": {"text": "warm"}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "warm up"}]}
    assert _chat(srv, body).status_code == 200
    return srv


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


# ------------------------------------------------------------------- bounded request bodies


def test_a_hundred_thousand_messages_are_a_400_and_health_stays_live(server: Server) -> None:
    messages = [{"role": "user", "content": f"m{i}"} for i in range(100_000)]
    body = json.dumps({"model": "courier", "messages": messages}).encode()
    assert len(body) > 2_500_000
    with HealthProbe(server) as probe:
        resp = _chat(server, body)
        time.sleep(0.3)
    error = _error(resp, 400)
    assert error["param"] == "messages" and error["code"] == "too_many_messages"
    assert "10000" in error["message"] and "100000" in error["message"]
    probe.assert_responsive(minimum_probes=3)


def _huge_int_body(filler: int = 0) -> bytes:
    padding = json.dumps("x" * filler)
    digits = "9" * 5000
    return (
        '{"model": "courier", "messages": [{"role": "user", "content": ' + padding + "}], "
        '"metadata": {"n": ' + digits + "}}"
    ).encode()


@pytest.mark.parametrize("filler", [0, 400_000], ids=["inline", "worker"])
def test_a_five_thousand_digit_integer_is_a_400(server: Server, filler: int) -> None:
    error = _error(_chat(server, _huge_int_body(filler)), 400)
    assert error["code"] == "invalid_json" and "digits" in error["message"]


@pytest.mark.parametrize("filler", [0, 400_000], ids=["inline", "worker"])
def test_nesting_past_the_limit_names_the_param(server: Server, filler: int) -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = {"k": deep}
    body = {
        "model": "courier",
        "messages": [{"role": "user", "content": "x" * filler}],
        "metadata": deep,
    }
    error = _error(_chat(server, body), 400)
    assert error["code"] == "nested_too_deeply"
    assert error["param"] == "metadata.k.k.k"


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe not utf-8",
        b'{"model": "courier", "messages": [',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"model": "courier", "messages": [{"role": "user", "content": "\\ud800"}]}',
        b'"just a string"',
        b"",
    ],
    ids=["bad-utf8", "truncated", "deep-array", "lone-surrogate", "not-object", "empty"],
)
def test_every_parse_failure_is_a_400(server: Server, body: bytes) -> None:
    error = _error(_chat(server, body), 400)
    assert error["code"] in ("invalid_json", "nested_too_deeply")


def test_a_large_valid_body_is_served_through_the_worker(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "big ok"}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "y" * 400_000}]}
    resp = _chat(server, body)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "big ok"
    sim.assert_script_done()


# ------------------------------------------------------------------- slow and greedy clients

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 2.0
PER_IP = 40


@pytest.fixture(scope="module")
def strict_server(module_servers: ServerFactory) -> Server:
    return module_servers(
        COURIER_HTTP_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S),
        COURIER_HTTP_BODY_TIMEOUT_S=str(BODY_TIMEOUT_S),
        COURIER_MAX_CONNECTIONS_PER_IP=str(PER_IP),
    )


def _open_fds(server: Server) -> int:
    assert server.proc is not None
    return len(os.listdir(f"/proc/{server.proc.pid}/fd"))


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes `sock` within `within_s` (reads until EOF or reset)."""
    sock.settimeout(within_s)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_slow_clients_are_dropped_within_the_timeout(strict_server: Server) -> None:
    baseline = _open_fds(strict_server)
    heads, bodies = [], []
    for _ in range(20):  # half-sent request heads
        s = socket.create_connection(("127.0.0.1", strict_server.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: courier\r\nX-Slow: ")
        heads.append(s)
    for _ in range(10):  # a complete head, then a body that never completes
        s = socket.create_connection(("127.0.0.1", strict_server.port))
        auth = strict_server.headers()["Authorization"]
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: courier\r\n"
            + f"Authorization: {auth}\r\nContent-Type: application/json\r\n".encode()
            + b"Content-Length: 100000\r\n\r\n{"
        )
        bodies.append(s)
    stop = threading.Event()

    def trickle() -> None:
        while not stop.is_set():
            for s in bodies:
                with contextlib.suppress(OSError):
                    s.send(b" ")
            stop.wait(0.2)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        # Generous margins over the deadlines; the old server kept all of them forever.
        dropped_heads = sum(_closed_by_server(s, HEADER_TIMEOUT_S + 5) for s in heads)
        dropped_bodies = sum(
            _closed_by_server(s, HEADER_TIMEOUT_S + BODY_TIMEOUT_S + 5) for s in bodies
        )
    finally:
        stop.set()
        trickler.join(5)
        for s in heads + bodies:
            s.close()
    assert (dropped_heads, dropped_bodies) == (20, 10)
    # Their descriptors are gone too, and the server still answers.
    _wait_until(lambda: _open_fds(strict_server) <= baseline + 2)
    assert httpx.get(f"{strict_server.base_url}/health", timeout=10).status_code == 200


def test_a_peer_past_its_connection_cap_is_refused(strict_server: Server) -> None:
    held = [socket.create_connection(("127.0.0.1", strict_server.port)) for _ in range(PER_IP)]
    try:
        extra = socket.create_connection(("127.0.0.1", strict_server.port))
        # Refused at once, long before the head deadline would have closed it.
        assert _closed_by_server(extra, HEADER_TIMEOUT_S / 2)
        extra.close()
    finally:
        for s in held:
            s.close()
    _wait_until(lambda: httpx.get(f"{strict_server.base_url}/health", timeout=5).status_code == 200)


def _wait_until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return
        time.sleep(0.1)
    raise AssertionError("condition not reached")


def test_an_empty_session_id_header_is_a_400(server: Server, sim: Simulator) -> None:
    body = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}
    error = _error(_chat(server, body, **{"X-Session-Id": ""}), 400)
    assert error["param"] == "X-Session-Id" and error["code"] == "invalid_session_id"
    assert sim.requests() == []  # refused before any session or upstream call


def test_a_blank_session_id_header_is_a_400(server: Server, sim: Simulator) -> None:
    # httpx refuses to send a whitespace-only value, so this one goes over a raw socket.
    payload = json.dumps({"model": "courier", "messages": [{"role": "user", "content": "x"}]})
    auth = server.headers()["Authorization"]
    raw = (
        f"POST {URL} HTTP/1.1\r\nHost: courier\r\nAuthorization: {auth}\r\n"
        "Content-Type: application/json\r\nX-Session-Id:  \t \r\nConnection: close\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n{payload}"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(raw)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.split()[1] == b"400", data
    assert json.loads(body)["error"]["param"] == "X-Session-Id"
    assert sim.requests() == []
