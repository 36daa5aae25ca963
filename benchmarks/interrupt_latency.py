"""How fast a turn stops (issue 13's 200 ms bounds), through the real server.

Each figure is measured `--runs` times against the simulator and printed as p50/p99, with
a baseline measured side by side in the same run:

- `interrupt`: a second message with `X-Courier-Busy: interrupt` while the first turn runs
  a sandboxed `sleep`: time from sending it to the first turn's stream ending, to the
  first turn's recorded end, and to the command's host process being dead. Baseline: the
  same turn stopped by `POST /v1/sessions/{id}/stop`.
- `hang-up mid-answer` (disconnect policy `cancel`): time from the client closing its
  connection to the simulator seeing Courier's upstream connection close. Baseline: a
  client streaming from the simulator directly and hanging up the same way.
- `hang-up mid-tool`: time from the client closing to the sandboxed command being dead.
  Baseline: the same command started in this process by the sandbox module and cancelled
  (the kill itself, with no server in between).

Clocks: every time is `time.time()` on this machine (the server's recorded end and the
simulator's disconnect time too), so differences are comparable. "Dead" is the process
gone from /proc or a zombie (it runs nothing), polled every 0.5 ms. Asserts nothing.

    .venv/bin/python benchmarks/interrupt_latency.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from _harness import REPO_ROOT, bench_key, free_port, start_server, start_simulator, stop, wait_http

sys.path.insert(0, str(REPO_ROOT))

POLL_S = 0.0005


def _host_pids(marker: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _dead(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _until(predicate: Callable[[], Any], within_s: float = 30.0, poll_s: float = 0.01) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise SystemExit("benchmark: a condition was not reached in 30 s")


def _wait_dead(pid: int) -> float:
    while not _dead(pid):
        time.sleep(POLL_S)
    return time.time()


class Bench:
    def __init__(self, sim_port: int, port: int, key: str, workspace: Path) -> None:
        self.sim = f"http://127.0.0.1:{sim_port}"
        self.url = f"http://127.0.0.1:{port}"
        self.auth = {"Authorization": f"Bearer {key}"}
        self.workspace = workspace
        self.n = 0
        # One kept-alive client for the interrupting request: a new client per request
        # would add its own set-up (an SSL context, a TCP connect) to every figure.
        self.control = httpx.Client(timeout=60)

    def script(self, steps: list[dict[str, Any]]) -> None:
        httpx.post(f"{self.sim}/_sim/script", json=steps, timeout=10).raise_for_status()

    def configure(self, **settings: Any) -> None:
        httpx.post(f"{self.sim}/_sim/config", json=settings, timeout=10).raise_for_status()

    def disconnects(self) -> dict[str, Any]:
        seen: dict[str, Any] = httpx.get(f"{self.sim}/_sim/disconnects", timeout=10).json()
        return seen

    def marker(self) -> tuple[str, bytes]:
        self.n += 1
        seconds = f"59.{self.n:04d}"
        return seconds, f"sleep\x00{seconds}".encode()

    def sleeper(self, seconds: str) -> dict[str, Any]:
        call = {"name": "terminal", "arguments": {"command": f"exec sleep {seconds}"}}
        return {"reply": {"text": "Running.", "tool_calls": [call]}}

    def stream(
        self, text: str, headers: dict[str, str], hang_up: threading.Event | None = None
    ) -> dict[str, Any]:
        """Start a streamed turn in a thread; the dict fills in `sid`, `first_text`, `ended`."""
        out: dict[str, Any] = {"sid": None, "first_text": None, "ended": None}

        def run() -> None:
            body = {
                "model": "courier",
                "stream": True,
                "messages": [{"role": "user", "content": text}],
            }
            with httpx.stream(
                "POST",
                f"{self.url}/v1/chat/completions",
                json=body,
                headers={**self.auth, **headers},
                timeout=60,
            ) as resp:
                out["sid"] = resp.headers["x-session-id"]
                for line in resp.iter_lines():
                    if (
                        out["first_text"] is None
                        and '"content":"' in line
                        and "Running" not in line
                    ):
                        out["first_text"] = time.time()
                    if hang_up is not None and hang_up.is_set():
                        break
                out["hung_up"] = time.time()
            out["ended"] = time.time()

        out["thread"] = threading.Thread(target=run, daemon=True)
        out["thread"].start()
        return out

    def turns(self, sid: str) -> list[dict[str, Any]]:
        resp = httpx.get(f"{self.url}/v1/sessions/{sid}/turns", headers=self.auth, timeout=10)
        data: list[dict[str, Any]] = resp.json()["data"]
        return data

    def first_ended_at(self, sid: str) -> float:
        turn = _until(lambda: (t := self.turns(sid)) and t[0]["ended_at"] and t[0])
        return float(turn["ended_at"])

    # -- interrupt, and its baseline: the stop route ----------------------------------------

    def interrupt(self, via_stop: bool) -> tuple[float, float, float]:
        seconds, marker = self.marker()
        self.script([self.sleeper(seconds), {"reply": {"text": "Stopped."}}])
        first = self.stream("run it", {})
        [pid] = _until(lambda: _host_pids(marker), poll_s=0.002)
        sid = first["sid"]
        self.control.get(f"{self.url}/health")  # the connection is open and warm
        if via_stop:
            second = threading.Thread(
                target=lambda: self.control.post(
                    f"{self.url}/v1/sessions/{sid}/stop", headers=self.auth
                ),
                daemon=True,
            )
        else:
            body = {"model": "courier", "messages": [{"role": "user", "content": "stop that"}]}
            headers = {**self.auth, "X-Session-Id": sid, "X-Courier-Busy": "interrupt"}
            second = threading.Thread(
                target=lambda: self.control.post(
                    f"{self.url}/v1/chat/completions", json=body, headers=headers
                ),
                daemon=True,
            )
        sent = time.time()
        second.start()
        gone = _wait_dead(pid)
        first["thread"].join(30)
        second.join(30)
        ended_at = self.first_ended_at(sid)
        return first["ended"] - sent, ended_at - sent, gone - sent

    # -- hang-up mid-answer, and its baseline: a direct stream from the simulator -----------

    def hang_up_answer(self, direct: bool) -> float:
        self.script([{"reply": {"text": " ".join(["word"] * 60)}}])
        before = self.disconnects()["count"]
        body = {"model": "gpt-4o-mini" if direct else "courier", "stream": True,
                "messages": [{"role": "user", "content": "talk slowly"}]}  # fmt: skip
        url = f"{self.sim}/v1/chat/completions" if direct else f"{self.url}/v1/chat/completions"
        headers = {**self.auth, "X-Courier-On-Disconnect": "cancel"}
        closed = 0.0
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as resp:
            for line in resp.iter_lines():
                if '"word' in line.replace('": "', '":"'):  # the simulator spaces its JSON
                    closed = time.time()  # leaving the block closes the connection
                    break
        seen = _until(lambda: (s := self.disconnects())["count"] > before and s, poll_s=0.002)
        return float(seen["last_at"]) - closed

    # -- hang-up mid-tool, and its baseline: the sandbox module's own cancel ----------------

    def hang_up_tool(self) -> tuple[float, float]:
        seconds, marker = self.marker()
        self.script([self.sleeper(seconds)])
        hang_up = threading.Event()
        turn = self.stream("run it", {"X-Courier-On-Disconnect": "cancel"}, hang_up)
        [pid] = _until(lambda: _host_pids(marker), poll_s=0.002)
        # The reader leaves at its next line: a keepalive comment (every 0.05 s here).
        hang_up.set()
        turn["thread"].join(30)
        closed = turn["hung_up"]
        gone = _wait_dead(pid)
        ended_at = self.first_ended_at(turn["sid"])
        return gone - closed, ended_at - closed

    def sandbox_cancel(self) -> float:
        from app.tools.sandbox.process import run_sandboxed

        seconds, marker = self.marker()

        async def once() -> float:
            task = asyncio.create_task(
                run_sandboxed(f"exec sleep {seconds}", self.workspace, timeout_s=60)
            )
            while not (pids := _host_pids(marker)):
                await asyncio.sleep(0.002)
            # Watched from a thread meanwhile: the task's own clean-up (the cgroup's removal)
            # goes on after the process is dead and must not count.
            watcher = asyncio.create_task(asyncio.to_thread(_wait_dead, pids[0]))
            await asyncio.sleep(0.01)  # the watcher is polling
            cancelled = time.time()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return await watcher - cancelled

        return asyncio.run(once())


def _row(name: str, samples: list[float]) -> float:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(len(ordered) * 0.99) - 1)]
    print(f"  {name:<52} p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms   n={len(samples)}")
    return p50


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    sim_port, port = free_port(), free_port()
    key = bench_key()
    data = Path(tempfile.mkdtemp(prefix="courier-bench-"))
    workspace = data / "ws"
    workspace.mkdir()
    sim = start_simulator(sim_port)
    env = {
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": str(data),
        "COURIER_WORKSPACE": str(workspace),
        "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim_port}/v1",
        "COURIER_UPSTREAM_API_KEY": "bench",
        "COURIER_APPROVALS_UNATTENDED": "allow",
        "COURIER_KEEPALIVE_S": "0.05",
        "COURIER_LOG_LEVEL": "warning",
    }
    server = start_server(env, inherit_courier_env=False)
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
        wait_http(f"http://127.0.0.1:{port}/health")
        bench = Bench(sim_port, port, key, workspace)
        bench.interrupt(via_stop=False)  # warm: the sandbox probe, imports, pools
        bench.sandbox_cancel()
        interrupt: list[tuple[float, float, float]] = []
        stopped: list[tuple[float, float, float]] = []
        for _ in range(args.runs):  # interleaved, so drift hits both alike
            interrupt.append(bench.interrupt(via_stop=False))
            stopped.append(bench.interrupt(via_stop=True))
        tool: list[tuple[float, float]] = []
        kill: list[float] = []
        for _ in range(args.runs):
            tool.append(bench.hang_up_tool())
            kill.append(bench.sandbox_cancel())
        bench.configure(tokens_per_second=40)
        through: list[float] = []
        direct: list[float] = []
        for _ in range(args.runs):
            through.append(bench.hang_up_answer(direct=False))
            direct.append(bench.hang_up_answer(direct=True))
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"{args.runs} runs each, load average {load} ({os.cpu_count()} cores)")
        print("interrupt (X-Courier-Busy: interrupt) of a turn running a sandboxed sleep")
        _row("interrupt sent -> first turn's stream ended", [s for s, _, _ in interrupt])
        ended = _row("interrupt sent -> first turn ended (server)", [e for _, e, _ in interrupt])
        _row("interrupt sent -> command dead", [g for _, _, g in interrupt])
        print("  baseline: POST /v1/sessions/{id}/stop")
        _row("stop sent -> first turn's stream ended", [s for s, _, _ in stopped])
        base = _row("stop sent -> first turn ended (server)", [e for _, e, _ in stopped])
        _row("stop sent -> command dead", [g for _, _, g in stopped])
        print(f"  interrupt / stop (turn ended, p50): {ended / base:.2f}x")
        print("hang-up mid-tool (X-Courier-On-Disconnect: cancel)")
        dead = _row("hang-up -> command dead", [g for g, _ in tool])
        _row("hang-up -> turn ended (server)", [e for _, e in tool])
        print("  baseline: the sandbox module cancelling the same command in-process")
        own = _row("cancel -> command dead", kill)
        print(f"  through the server / in-process (p50): {dead / own:.2f}x")
        print("hang-up mid-answer (X-Courier-On-Disconnect: cancel)")
        ours = _row("hang-up -> upstream connection closed at simulator", through)
        print("  baseline: a client hanging up a direct simulator stream")
        theirs = _row("hang-up -> simulator sees it", direct)
        print(f"  through the server / direct (p50): {ours / theirs:.2f}x")
        return 0
    finally:
        stop(server, sim)


if __name__ == "__main__":
    sys.exit(main())
