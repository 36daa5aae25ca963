"""Load on the shipped defaults (issue 30): no setting changed, as a new user runs it.

Two figures, each beside a baseline measured in the same run on a server whose safety caps
are lifted (`hot_path.load_limits`: what the machine can do, not what the caps allow):

* `streams` 100 concurrent streamed turns from one client address for `--seconds`
            (2-second answers at 20 tokens/s): requests answered and refused, TTFT;
* `open`    1,000 streams held open from 8 loopback addresses (125 each, as clients
            behind different addresses are): how many are live upstream (first token
            received) and the server's RSS.

`--old` adds the defaults before issue 30 (10 turns, 64 connections per address) as a
third column. Figures only; nothing is asserted.

    .venv/bin/python benchmarks/defaults_load.py [--only streams,open] [--old]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import time
from collections import Counter
from contextlib import suppress

import httpx
from hot_path import Rig, _Caller, has_content, load_limits, pct, rss_mb

OLD_DEFAULTS = {"COURIER_MAX_CONCURRENT_TURNS": "10", "COURIER_MAX_CONNECTIONS_PER_IP": "64"}
SOURCES = 8
"""Loopback source addresses for the open streams (127.0.0.1 .. 127.0.0.8)."""


async def _streams(rig: Rig, workers: int, seconds: float) -> tuple[Counter[str], list[float]]:
    """`workers` callers from 127.0.0.1 posting streamed turns back to back; outcomes by
    status and the TTFTs of the answered ones."""
    outcomes: Counter[str] = Counter()
    ttfts: list[float] = []
    deadline = time.monotonic() + seconds
    sent = itertools.count()

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)
        caller = _Caller(rig.url, rig.auth)
        while time.monotonic() < deadline:
            body = {
                "model": "courier",
                "stream": True,
                "messages": [{"role": "user", "content": f"Hi, caller {next(sent)} here."}],
            }
            try:
                ttft = await caller.first_token(json.dumps(body).encode())
            except (RuntimeError, OSError, asyncio.IncompleteReadError) as exc:
                status = str(exc).split(" ")[1] if str(exc).startswith("HTTP/1.1") else "reset"
                outcomes[status] += 1
                if caller.writer is not None:
                    caller.writer.close()
                caller = _Caller(rig.url, rig.auth)  # a refused request's body is unread
                await asyncio.sleep(0.05)
                continue
            outcomes["200"] += 1
            if ttft is not None:
                ttfts.append(ttft)
        if caller.writer is not None:
            caller.writer.close()

    await asyncio.gather(*(worker(i * 2.0 / workers) for i in range(workers)))
    return outcomes, ttfts


def bench_streams(rig: Rig, workers: int, seconds: float) -> str:
    rig.reset()
    rig.turn()  # one-off costs (lazy imports, the first upstream connection) first
    rig.configure(tokens_per_second=20)
    try:
        outcomes, ttfts = asyncio.run(_streams(rig, workers, seconds))
    finally:
        rig.reset()
    refused = sum(n for status, n in outcomes.items() if status != "200")
    detail = ", ".join(f"{s}: {n}" for s, n in sorted(outcomes.items()) if s != "200") or "none"
    p50 = statistics.median(ttfts) * 1000 if ttfts else float("nan")
    p99 = pct(ttfts, 0.99) * 1000 if ttfts else float("nan")
    return (
        f"{outcomes['200']} answered, {refused} refused ({detail}); "
        f"TTFT p50 {p50:.1f} p99 {p99:.1f} ms"
    )


async def _open(rig: Rig, count: int, wait_s: float) -> tuple[int, Counter[str], float]:
    """Hold `count` streams open from `SOURCES` addresses; (live, failures, RSS MB)."""
    per_source = -(-count // SOURCES)
    limits = httpx.Limits(max_connections=per_source + 10, max_keepalive_connections=0)
    clients = [
        httpx.AsyncClient(
            timeout=300,
            limits=limits,
            transport=httpx.AsyncHTTPTransport(local_address=f"127.0.0.{n + 1}", limits=limits),
        )
        for n in range(SOURCES)
    ]
    live = 0
    failed: Counter[str] = Counter()
    all_live = asyncio.Event()

    async def one(client: httpx.AsyncClient, n: int) -> None:
        nonlocal live
        # Each its own words: one key's byte-identical bodies would attach to one turn
        # (a retry, by design), and 1,000 streams would be one turn upstream.
        words = f"Hi, stream {n} here."
        body = {
            "model": "courier",
            "stream": True,
            "messages": [{"role": "user", "content": words}],
        }
        try:
            async with client.stream("POST", rig.url, json=body, headers=rig.auth) as resp:
                if resp.status_code != 200:
                    failed[str(resp.status_code)] += 1
                    return
                async for line in resp.aiter_lines():
                    if has_content(line):
                        live += 1
                        if live == count:
                            all_live.set()
                        await asyncio.sleep(3600)  # hold the stream open
        except httpx.HTTPError as exc:
            failed[type(exc).__name__] += 1

    tasks = [asyncio.create_task(one(clients[i % SOURCES], i)) for i in range(count)]
    with suppress(TimeoutError):
        await asyncio.wait_for(all_live.wait(), wait_s)
    await asyncio.sleep(1)
    rss = rss_mb(rig.server.pid)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.gather(*(c.aclose() for c in clients))
    return live, failed, rss


def bench_open(rig: Rig, count: int, wait_s: float) -> str:
    rig.reset()
    idle = rss_mb(rig.server.pid)
    rig.configure(tokens_per_second=0.5)  # one token every 2 s: all still running upstream
    try:
        live, failed, rss = asyncio.run(_open(rig, count, wait_s))
        upstream = len(rig.control.get("/_sim/requests").json())
    finally:
        rig.reset()
    time.sleep(2)  # let the server finish cancelling the turns
    failures = ", ".join(f"{k}: {n}" for k, n in sorted(failed.items())) or "none"
    return (
        f"{live}/{count} live ({upstream} upstream calls), failures {failures}; "
        f"RSS {rss:.0f} MB (idle {idle:.0f} MB)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="streams,open")
    parser.add_argument("--old", action="store_true", help="also the pre-issue-30 defaults")
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--wait", type=float, default=90.0)
    args = parser.parse_args()
    only = set(args.only.split(","))
    columns: list[tuple[str, dict[str, str]]] = [
        ("defaults", {}),
        ("caps lifted (baseline)", load_limits(args.streams)),
    ]
    if args.old:
        columns.append(("pre-issue-30 defaults", OLD_DEFAULTS))
    for name, env in columns:
        rig = Rig(env, wait_s=120)
        try:
            print(f"{name}:")
            if "streams" in only:
                print(
                    f"  {args.workers} streams, one address: "
                    + bench_streams(rig, args.workers, args.seconds)
                )
            if "open" in only:
                print(f"  {args.streams} open streams: " + bench_open(rig, args.streams, args.wait))
        finally:
            rig.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
