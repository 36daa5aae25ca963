"""Start the real Courier server (uvicorn in a subprocess) on a loopback port.

The one way a test gets a server: the `servers` fixture (or `module_servers`, for a server
a whole module shares) starts one against the session's simulator with the settings the
test names, and stops every server it started when its scope ends:

    def test_x(servers: ServerFactory) -> None:
        server = servers("anthropic", COURIER_MAX_ITERATIONS="2")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app.ops import ports
from tests.support import postgres
from tests.support.sim import Simulator

API_KEY = "test-key-0123456789abcdef"


def free_port() -> int:
    # Not a bare bind to port 0: see app/ops/ports.py (a port a container mapping holds).
    return ports.free_port()


@dataclass
class Server:
    data_dir: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_key(self) -> str:
        return self.env.get("COURIER_API_KEY", API_KEY)

    def start(self, timeout: float = 60.0) -> Server:
        # Generous: importing the app takes 10+ s on a loaded 2-core CI box, and a start
        # that merely took long is not the failure any test is looking for.
        env = {**os.environ, **self.env, "COURIER_PORT": str(self.port)}
        env.setdefault("COURIER_DATA_DIR", str(self.data_dir))
        self.log_path = self.data_dir / f"server-{self.port}.log"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve"], env=env, stdout=log, stderr=log
        )
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                answer = httpx.get(f"{self.base_url}/health", timeout=1, trust_env=False)
                if answer.status_code == 200:
                    return self
                last = f"HTTP {answer.status_code}: {answer.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.05)  # also after a non-200: a tight loop would flood the server
        self.stop()
        raise RuntimeError(f"server did not start (last probe: {last}):\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def kill(self) -> None:
        """SIGKILL: no cleanup runs, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", **extra}


def sim_env(sim_base_url: str, provider: str = "openai", **extra: str) -> dict[str, str]:
    """Env pointing the default profile at the simulator on the given wire."""
    base = f"{sim_base_url}/v1" if provider == "openai" else sim_base_url
    return {
        "COURIER_API_KEY": API_KEY,
        "COURIER_UPSTREAM_PROVIDER": provider,
        "COURIER_UPSTREAM_BASE_URL": base,
        "COURIER_UPSTREAM_API_KEY": "sim-upstream-key",
        "COURIER_UPSTREAM_MODEL": "gpt-4o-mini" if provider == "openai" else "claude-sonnet-4-5",
        "COURIER_KEEPALIVE_S": "5",
        "COURIER_UPSTREAM_RETRY_BASE_DELAY_S": "0.01",
        **extra,
    }


ON_POSTGRES = os.environ.get("COURIER_TEST_BACKEND") == postgres.POSTGRES
"""`COURIER_TEST_BACKEND=postgresql`: every server the factory starts keeps its store in a
PostgreSQL database of its own on the run's cluster (a restart keeps it), so any e2e
module runs on PostgreSQL unchanged. What reads the SQLite file directly fails there."""


class ServerFactory:
    """Starts Courier servers on the simulator's wire; `stop_all` stops each one it started."""

    def __init__(self, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.simulator = simulator
        self._tmp = tmp_path_factory
        self._started: list[Server] = []

    def __call__(
        self,
        provider: str = "openai",
        *,
        data_dir: Path | None = None,
        start: bool = True,
        timeout: float = 60.0,
        **env: str,
    ) -> Server:
        """A server whose settings are `sim_env`'s plus `env`, in a data directory of its
        own unless `data_dir` names one (a restart, a copied database). `start=False` hands
        it over unstarted, for a test that starts (and restarts) it itself."""
        if ON_POSTGRES and "COURIER_DATABASE_URL" not in env:
            env["COURIER_DATABASE_URL"] = postgres.server_database()
        server = Server(
            data_dir=data_dir or self._tmp.mktemp("courier"),
            env=sim_env(self.simulator.base_url, provider, **env),
        )
        self._started.append(server)
        return server.start(timeout) if start else server

    def like(self, server: Server, *, data_dir: Path) -> Server:
        """Another server with `server`'s settings, started on `data_dir` (a copy of its
        database, say, to see what a cold start rebuilds)."""
        twin = Server(data_dir=data_dir, env=dict(server.env))
        self._started.append(twin)
        return twin.start()

    def stop_all(self) -> None:
        for server in reversed(self._started):
            server.stop()
        self._started.clear()


@pytest.fixture
def servers(
    simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerFactory]:
    """Servers for one test, stopped when it ends (also when it fails)."""
    factory = ServerFactory(simulator, tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def module_servers(
    simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerFactory]:
    """Servers a module's tests share, stopped after its last test."""
    factory = ServerFactory(simulator, tmp_path_factory)
    yield factory
    factory.stop_all()
