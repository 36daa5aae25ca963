"""Run the upstream simulator as a real subprocess and drive its `/_sim/*` controls.

sim = start_simulator(ttft_ms=0)
sim.script([{"reply": {"text": "hi"}}])
...  # point a provider at f"{sim.base_url}/v1" (OpenAI) or sim.base_url (Anthropic)
sim.assert_script_done()
sim.stop()
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from types import TracebackType
from typing import Any

import httpx

from tests.support.paths import REPO as REPO_ROOT

STARTUP_TIMEOUT = 20.0
_LISTENING = "courier simulator listening on "


class SimulatorError(AssertionError):
    """The simulator did not start, or a test's script was not used as written."""


class Simulator:
    """A running simulator subprocess; `base_url` has no `/v1` suffix."""

    def __init__(self, process: subprocess.Popen[str], base_url: str, log: collections.deque[str]):
        self.process = process
        self.base_url = base_url
        self._log = log
        self._http = httpx.Client(base_url=base_url, timeout=10.0)

    # ---------------------------------------------------------------- controls

    def script(self, steps: list[dict[str, Any]]) -> None:
        """Load steps (replacing any current script); a malformed step raises here."""
        response = self._http.post("/_sim/script", json=steps)
        if response.status_code != 200:
            raise SimulatorError(f"script rejected: {response.text}")

    def status(self) -> dict[str, Any]:
        """`{"remaining": int, "failures": [str, ...]}`."""
        return self._get("/_sim/script")  # type: ignore[no-any-return]

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """Recorded `/v1/*` requests: `{"path", "body" (raw text), "headers", "time"}`."""
        params = {"path": path} if path else None
        return self._get("/_sim/requests", params=params)  # type: ignore[no-any-return]

    def connections(self) -> int:
        """Distinct TCP connections that carried a model request since the last reset."""
        return int(self._get("/_sim/connections")["connections"])

    def stats(self) -> dict[str, int]:
        """`{"model_requests", "disconnects"}`: model calls taken, and how many of them the
        client (Courier) abandoned before the answer was complete."""
        return self._get("/_sim/stats")  # type: ignore[no-any-return]

    def reset(self) -> None:
        """Clear script, failures, requests and cache; restore startup settings and clock."""
        self._post("/_sim/reset", {})

    def advance_clock(self, seconds: float) -> None:
        self._post("/_sim/clock", {"advance": seconds})

    def configure(self, **settings: Any) -> None:
        """Change settings (ttft_ms, tokens_per_second, context_window, min_cacheable_tokens,
        required_key, model) until the next reset."""
        self._post("/_sim/config", settings)

    def assert_script_done(self) -> None:
        status = self.status()
        problems = list(status["failures"])
        if status["remaining"]:
            problems.append(f"{status['remaining']} scripted step(s) were never requested")
        if problems:
            raise SimulatorError("simulator script not completed:\n  " + "\n  ".join(problems))

    # ---------------------------------------------------------------- lifecycle

    def output(self) -> str:
        """The simulator's recent stdout/stderr, for diagnosing a failed test."""
        return "\n".join(self._log)

    def stop(self) -> None:
        self._http.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Simulator:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- plumbing

    def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        response = self._http.get(path, params=params)
        response.raise_for_status()
        return response.json()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self._http.post(path, json=body)
        if response.status_code != 200:
            raise SimulatorError(f"POST {path} failed: {response.status_code} {response.text}")
        return response.json()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _command(host: str, config: dict[str, Any]) -> list[str]:
    command = [sys.executable, "-m", "app.simulator", "--host", host, "--port", "0"]
    for name, value in config.items():
        if value is not None:
            command += [_flag(name), str(value)]
    return command


def _drain(process: subprocess.Popen[str], log: collections.deque[str], ready: list[str]) -> None:
    # Runs for the process's life: an unread pipe would eventually block the simulator.
    assert process.stdout is not None
    for line in process.stdout:
        log.append(line.rstrip("\n"))
        if not ready and line.startswith(_LISTENING):
            ready.append(line[len(_LISTENING) :].strip())


def _wait_ready(
    process: subprocess.Popen[str], ready: list[str], log: collections.deque[str]
) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if ready:
            return ready[0]
        if process.poll() is not None:
            break
        time.sleep(0.02)
    process.kill()
    raise SimulatorError("simulator did not start:\n" + "\n".join(log))


def start_simulator(host: str = "127.0.0.1", **config: Any) -> Simulator:
    """Start `python -m app.simulator` on a free port and wait until it answers.

    `config` takes the settings of `SimulatorConfig` (ttft_ms, tokens_per_second,
    context_window, min_cacheable_tokens, required_key, model).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        _command(host, config),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log: collections.deque[str] = collections.deque(maxlen=500)
    ready: list[str] = []
    threading.Thread(target=_drain, args=(process, log, ready), daemon=True).start()
    simulator = Simulator(process, _wait_ready(process, ready, log), log)
    try:
        simulator.status()
    except httpx.HTTPError as exc:
        simulator.stop()
        raise SimulatorError(f"simulator is not answering: {exc}\n{simulator.output()}") from exc
    return simulator
