"""What an MCP tool call costs over a built-in one.

Runs the simulator and the real server (with COURIER_MCP_CONFIG naming the SDK-built
toolbox over stdio and over HTTP) as subprocesses, and sends scripted turns of one tool
call and an answer, interleaved by kind so load on a shared machine falls on every kind
alike:

  built-in   `todo` (read the list), a store tool
  stdio      `mcp__bench__echo` over stdio
  http       `mcp__benchhttp__echo` over streamable HTTP
  raw floor  the SDK's own `Client.call_tool("echo")` over HTTP from this process, no
             Courier, one call after each round

Printed per kind: median and p90 of the tool's duration as the `tool.finished` event
reports it (`X-Courier-Events: tools`) and of the turn's wall time, and each MCP kind's
ratio to the built-in call measured in the same run. Figures only.

    .venv/bin/python benchmarks/mcp_overhead.py [--turns 100]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _harness import REPO_ROOT, bench_key, free_port, start_server, start_simulator, stop, wait_http
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOOLBOX = REPO_ROOT / "tests" / "support" / "mcp_servers" / "toolbox.py"
CALLS = {
    "built-in": ("todo", {}),
    "stdio": ("mcp__bench__echo", {"text": "ping"}),
    "http": ("mcp__benchhttp__echo", {"text": "ping"}),
}


def turn(base: str, key: str, control: httpx.Client, kind: str) -> tuple[float, float]:
    name, args = CALLS[kind]
    steps = [{"reply": {"tool_calls": [{"name": name, "arguments": args}]}}]
    control.post("/_sim/script", json=[*steps, {"reply": {"text": "ok"}}]).raise_for_status()
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": kind}]}
    headers = {"Authorization": f"Bearer {key}", "X-Courier-Events": "tools"}
    start = time.perf_counter()
    duration = None
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {") and '"tool.finished"' in line:
                event = json.loads(line[6:])["courier"]
                if not event["ok"]:
                    raise SystemExit(f"{kind}: the tool call failed")
                duration = event["duration_ms"]
    wall = (time.perf_counter() - start) * 1000
    if duration is None:
        raise SystemExit(f"{kind}: no tool.finished event (status {resp.status_code})")
    return duration, wall


class RawFloor:
    """The SDK's own client on a loop of its own (a thread), called between the turns, so
    the floor is measured under the same load as everything else."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stop = asyncio.Event()
        self.ready: concurrent.futures.Future[Client] = concurrent.futures.Future()
        self.owner = asyncio.run_coroutine_threadsafe(self._own(url), self.loop)
        self.client = self.ready.result(60)

    async def _own(self, url: str) -> None:
        async with Client(streamable_http_client(url), cache=None) as client:
            self.ready.set_result(client)
            await self.stop.wait()

    def call(self) -> float:
        async def one() -> float:
            start = time.perf_counter()
            await self.client.call_tool("echo", {"text": "ping"})
            return (time.perf_counter() - start) * 1000

        return asyncio.run_coroutine_threadsafe(one(), self.loop).result(60)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.owner.result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def figures(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[int(0.9 * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=100)
    turns = parser.parse_args().turns
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sim_port, http_port = free_port(), free_port()
        sim = start_simulator(sim_port)
        toolbox = subprocess.Popen(
            [sys.executable, str(TOOLBOX), "http", str(http_port)],
            env={"PATH": "/usr/bin:/bin", "HOME": tmp},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{http_port}/mcp"
        stdio = {"command": sys.executable, "args": [str(TOOLBOX), "stdio"], "approval": "never"}
        servers = {"bench": stdio, "benchhttp": {"url": url, "approval": "never"}}
        (root / "mcp.json").write_text(json.dumps({"mcpServers": servers}))
        port, key = free_port(), bench_key()
        env = {
            "COURIER_API_KEY": key,
            "COURIER_PORT": str(port),
            "COURIER_DATA_DIR": str(root / "data"),
            "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim_port}/v1",
            "COURIER_UPSTREAM_API_KEY": "sim",
            "COURIER_MCP_CONFIG": str(root / "mcp.json"),
            "COURIER_MCP_URL_ALLOW": f"127.0.0.1:{http_port}",
        }
        server = start_server(env, inherit_courier_env=False)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
            wait_http(url)
            wait_http(f"{base}/health", timeout=60)
            control = httpx.Client(base_url=f"http://127.0.0.1:{sim_port}")
            for _ in range(600):  # the servers connect after boot; wait for both
                try:
                    for kind in ("stdio", "http"):
                        turn(base, key, control, kind)
                    break
                except SystemExit:
                    time.sleep(0.1)
            results: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in CALLS}
            raw = RawFloor(url)
            floor: list[float] = []
            for _ in range(turns):
                for kind in CALLS:
                    duration, wall = turn(base, key, control, kind)
                    results[kind][0].append(duration)
                    results[kind][1].append(wall)
                floor.append(raw.call())
            raw.close()
        finally:
            stop(server, toolbox, sim)
    print(f"MCP call overhead, {turns} turns per kind, interleaved (ms)")
    base_tool, base_wall = figures(results["built-in"][0])[0], figures(results["built-in"][1])[0]
    for kind, (durations, walls) in results.items():
        (d50, d90), (w50, w90) = figures(durations), figures(walls)
        print(
            f"  {kind:<9} tool median {d50:7.2f} p90 {d90:7.2f} ({d50 / base_tool:5.1f}x built-in)"
            f"   turn median {w50:7.2f} p90 {w90:7.2f} ({w50 / base_wall:4.2f}x built-in)"
        )
    f50, f90 = figures(floor)
    print(f"  raw floor tool median {f50:7.2f} p90 {f90:7.2f} (the SDK over HTTP, no Courier)")
    http50 = figures(results["http"][0])[0]
    print(f"  Courier's own cost on an HTTP call: {http50 - f50:.2f} ms over the raw floor")


if __name__ == "__main__":
    main()
