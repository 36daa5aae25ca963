"""What the benchmarks share: the simulator and the real server as subprocesses on free
loopback ports, started and stopped the same way everywhere.

Imported as `_harness` (benchmarks run as scripts, so this directory is on `sys.path`).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from app.ops import ports

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    # Not a bare bind to port 0: see app/ops/ports.py (a port a container mapping holds).
    return ports.free_port()


def bench_key() -> str:
    return "bench-" + secrets.token_hex(16)


def wait_http(url: str, timeout: float = 30.0) -> None:
    """Return once `url` answers anything at all; exit the benchmark if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not come up")


def start_simulator(
    port: int, *, prefix: Sequence[str] = (), python: str = sys.executable
) -> subprocess.Popen[bytes]:
    """`python -m app.simulator` on `port`; call `wait_http` on its `/v1/models` before use.
    `prefix` runs the interpreter under another program (benchmarks/instructions.py);
    `python` is another interpreter with the dependencies (benchmarks/interpreter.py)."""
    return subprocess.Popen(
        [*prefix, python, "-m", "app.simulator", "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_server(
    env: dict[str, str],
    *,
    inherit_courier_env: bool = True,
    log: Path | None = None,
    argv: tuple[str, ...] = ("-m", "app.cli", "serve"),
    prefix: Sequence[str] = (),
    python: str = sys.executable,
) -> subprocess.Popen[bytes]:
    """`python -m app.cli serve` with `env` over this process's environment.

    `inherit_courier_env=False` drops any `COURIER_*` variable of the caller's shell, so a
    stray `COURIER_CONFIG` or strategy cannot skew a measurement. `log` receives the
    server's stdout and stderr (otherwise discarded). `argv` replaces the command after
    the interpreter (a benchmark's own entry point that patches the server first);
    `prefix` runs the interpreter under another program (benchmarks/instructions.py);
    `python` is another interpreter with the dependencies (benchmarks/interpreter.py).
    """
    base = {
        k: v for k, v in os.environ.items() if inherit_courier_env or not k.startswith("COURIER_")
    }
    command = [*prefix, python, *argv]
    if log is None:
        return subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**base, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    with log.open("ab") as sink:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            command, cwd=REPO_ROOT, env={**base, **env}, stdout=sink, stderr=sink
        )


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """Terminate each process we started, killing any that ignores the request."""
    for proc in procs:
        if proc.poll() is not None:
            continue
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
