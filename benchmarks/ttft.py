"""Time to first content token through Courier, against the simulator called directly.

Both are measured side by side in the same run with the same streaming client, so the
ratio is the latency Courier adds before a voice cockpit hears anything. Prints medians
and p90s; asserts nothing (shared machines are noisy).

    .venv/bin/python benchmarks/ttft.py [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import httpx
from _harness import bench_key, free_port, start_server, start_simulator, stop, wait_http


def _first_token(
    client: httpx.Client, url: str, headers: dict[str, str], body: dict[str, object]
) -> float:
    started = time.perf_counter()
    with client.stream("POST", url, json=body, headers=headers) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                return time.perf_counter() - started
    raise RuntimeError("stream ended without content")


def _summary(name: str, samples: list[float]) -> float:
    ordered = sorted(samples)
    median = statistics.median(ordered)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    print(
        f"{name:<28} median {median * 1000:7.2f} ms   p90 {p90 * 1000:7.2f} ms   n={len(samples)}"
    )
    return median


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    sim_port, port = free_port(), free_port()
    key = bench_key()
    data = tempfile.mkdtemp(prefix="courier-bench-")
    sim = start_simulator(sim_port)
    env = {
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": data,
        "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim_port}/v1",
        "COURIER_UPSTREAM_API_KEY": "bench",
        "COURIER_LOG_LEVEL": "warning",
    }
    server = start_server(env)
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
        wait_http(f"http://127.0.0.1:{port}/health")
        messages = [{"role": "user", "content": "Say something short."}]
        direct_body = {"model": "gpt-4o-mini", "messages": messages, "stream": True}
        courier_body = {"model": "courier", "messages": messages, "stream": True}
        direct_url = f"http://127.0.0.1:{sim_port}/v1/chat/completions"
        courier_url = f"http://127.0.0.1:{port}/v1/chat/completions"
        auth = {"Authorization": f"Bearer {key}"}
        direct: list[float] = []
        through: list[float] = []
        with httpx.Client(timeout=30) as client:
            for _ in range(3):  # warm both paths
                _first_token(client, direct_url, auth, direct_body)
                _first_token(client, courier_url, auth, courier_body)
            for _ in range(args.requests):  # interleaved, so drift hits both alike
                direct.append(_first_token(client, direct_url, auth, direct_body))
                through.append(_first_token(client, courier_url, auth, courier_body))
        base = _summary("simulator direct", direct)
        ours = _summary("through courier (new session)", through)
        print(
            f"courier adds {(ours - base) * 1000:.2f} ms at the median (ratio {ours / base:.2f}x)"
        )
        return 0
    finally:
        stop(server, sim)


if __name__ == "__main__":
    sys.exit(main())
