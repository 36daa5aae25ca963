"""The hot path: what one request costs Courier, measured against the upstream itself.

Runs the real server and the simulator as subprocesses and prints, for issue 10:

* `cpu`     server CPU per request by kind (new session, continued session, tool turn),
            CPU per streamed chunk, and commits / SQL statements per turn (counted by the
            server's engine hooks, read from `/metrics`); the simulator's own CPU per
            request is the baseline: an upstream on the same stack doing less work;
* `growth`  CPU per turn at turn 10 and at turn 250 of one session, continued by its id
            and continued as clients do, by resending the whole history; and, side by
            side, blocks of turns alternating between the grown session and a new one;
* `ttft`    time to first token through Courier vs the simulator called directly, at
            concurrency 1 and at 100 concurrent 2-second streams;
* `conns`   new upstream TCP connections per request after warm-up;
* `rss`     the server's RSS with 1,000 open streams, and how many were live upstream;
* `search`  session_search at 1M message rows (the database is built once and cached).

Figures and ratios only; nothing is asserted (the machine is shared and noisy).

    .venv/bin/python benchmarks/hot_path.py [--only cpu,growth,ttft,conns,rss,search]
                                            [--wire openai|anthropic]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
from _harness import REPO_ROOT, bench_key, free_port, start_server, start_simulator, stop, wait_http

TICK = os.sysconf("SC_CLK_TCK")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


def text_of(words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(words)) + "."


def has_content(line: str) -> bool:
    """An SSE data line whose chunk carries non-empty delta content (either server's)."""
    if not line.startswith("data: {") or '"content"' not in line:
        return False
    choices = json.loads(line[6:]).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, to the nanosecond where the kernel
    lets us read another process's CPU clock (Linux's clock id for a pid, what
    clock_getcpuclockid(3) returns). /proc's figures move in 10 ms ticks, a third of a
    10-turn window of the growth figure."""
    with suppress(OSError):
        return time.clock_gettime((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole process
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu_s(pid: int, name: str) -> float:
    """CPU seconds of the process's threads the OS knows by `name` (the store's writer), in
    /proc's 10 ms ticks: the kernel lets only a thread's own process read its CPU clock."""
    total = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != name:
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended between the listing and the read
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _anthropic_wire(port: int) -> dict[str, str]:
    # The SDK's base URL excludes `/v1`; the simulator answers `/v1/messages` too.
    return {
        "COURIER_UPSTREAM_PROVIDER": "anthropic",
        "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{port}",
        "COURIER_UPSTREAM_MODEL": "claude-sonnet-4-5",
    }


WIRES: dict[str, Callable[[int], dict[str, str]]] = {
    "openai": lambda port: {},
    "anthropic": _anthropic_wire,
}
"""The upstream wire the Courier profile speaks to the simulator (`--wire`)."""


class Rig:
    """One simulator and one Courier server, with the controls the sections need."""

    def __init__(
        self,
        extra_env: dict[str, str] | None = None,
        *,
        wire: str = "openai",
        argv: tuple[str, ...] = ("-m", "app.cli", "serve"),
        prefix: tuple[str, ...] = (),
        sim_prefix: tuple[str, ...] = (),
        wait_s: float = 30.0,
        python: str = sys.executable,
    ) -> None:
        self.sim_port, self.port = free_port(), free_port()
        self.key, self.metrics_key = bench_key(), bench_key()
        self.data = tempfile.mkdtemp(prefix="courier-bench-")
        self.sim = start_simulator(self.sim_port, prefix=sim_prefix, python=python)
        env = {
            "COURIER_API_KEY": self.key,
            "COURIER_METRICS_API_KEY": self.metrics_key,
            "COURIER_PORT": str(self.port),
            "COURIER_DATA_DIR": self.data,
            "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{self.sim_port}/v1",
            "COURIER_UPSTREAM_API_KEY": "bench",
            **(WIRES[wire](self.sim_port)),
            "COURIER_LOG_LEVEL": "warning",
            **(extra_env or {}),
        }
        self.server = start_server(
            env, inherit_courier_env=False, argv=argv, prefix=prefix, python=python
        )
        wait_http(f"http://127.0.0.1:{self.sim_port}/v1/models", wait_s)
        wait_http(f"http://127.0.0.1:{self.port}/health", wait_s)
        self.control = httpx.Client(base_url=f"http://127.0.0.1:{self.sim_port}", timeout=30)
        self.http = httpx.Client(timeout=120)
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        self.direct_url = f"http://127.0.0.1:{self.sim_port}/v1/chat/completions"
        self.auth = {"Authorization": f"Bearer {self.key}"}

    def close(self) -> None:
        self.http.close()
        self.control.close()
        stop(self.server, self.sim)

    def script(self, steps: list[dict[str, Any]]) -> None:
        self.control.post("/_sim/script", json=steps).raise_for_status()

    def configure(self, **settings: Any) -> None:
        self.control.post("/_sim/config", json=settings).raise_for_status()

    def reset(self) -> None:
        self.control.post("/_sim/reset", json={}).raise_for_status()

    def upstream_body(self) -> dict[str, Any]:
        """The last chat request the simulator received (Courier's upstream call)."""
        recorded = self.control.get("/_sim/requests").json()
        body = [r for r in recorded if r["path"].endswith("/chat/completions")][-1]["body"]
        return dict(json.loads(body) if isinstance(body, str) else body)

    def connections(self) -> int:
        return int(self.control.get("/_sim/connections").json()["connections"])

    def db_counts(self) -> tuple[float, float]:
        """(commits, statements) the server has counted since it started."""
        body = self.http.get(
            f"http://127.0.0.1:{self.port}/metrics",
            headers={"Authorization": f"Bearer {self.metrics_key}"},
        ).text
        values = {"courier_db_commits_total": 0.0, "courier_db_statements_total": 0.0}
        for line in body.splitlines():
            name, _, value = line.partition(" ")
            if name in values:
                values[name] = float(value)
        return values["courier_db_commits_total"], values["courier_db_statements_total"]

    def gc_pauses(self) -> dict[str, tuple[float, float, float]]:
        """generation -> (collections, seconds, collections over 10 ms) since the server
        started, from its `courier_gc_pause_seconds` histogram."""
        body = self.http.get(
            f"http://127.0.0.1:{self.port}/metrics",
            headers={"Authorization": f"Bearer {self.metrics_key}"},
        ).text
        found: dict[str, dict[str, float]] = {}
        for line in body.splitlines():
            if not line.startswith("courier_gc_pause_seconds_"):
                continue
            name, _, value = line.rpartition(" ")
            generation = name.split('generation="')[1].split('"')[0]
            kind = name.removeprefix("courier_gc_pause_seconds_").split("{")[0]
            if kind == "bucket":
                kind = name.split('le="')[1].split('"')[0]
            found.setdefault(generation, {})[kind] = float(value)
        return {
            g: (v["count"], v["sum"], v["count"] - v.get("0.01", 0.0)) for g, v in found.items()
        }

    def turn(self, content: str = "Say something.", session: str | None = None) -> str:
        """One streamed request read to its end; returns the session id."""
        return self.converse([{"role": "user", "content": content}], session=session)[0]

    def converse(
        self, messages: list[dict[str, str]], session: str | None = None
    ) -> tuple[str, str]:
        """One streamed request with these messages read to its end: (session id, the
        answer's text as the client received it)."""
        headers = dict(self.auth)
        if session:
            headers["X-Session-Id"] = session
        body = {"model": "courier", "stream": True, "messages": messages}
        said: list[str] = []
        with self.http.stream("POST", self.url, json=body, headers=headers) as resp:
            resp.raise_for_status()
            sid = resp.headers["x-session-id"]
            for line in resp.iter_lines():
                if line.startswith("data: {") and '"error"' in line[:20]:
                    raise RuntimeError(line)
                if has_content(line):
                    said.append(json.loads(line[6:])["choices"][0]["delta"]["content"])
        return sid, "".join(said)


@contextmanager
def measured(rig: Rig, n: int, out: dict[str, float]) -> Iterator[None]:
    """CPU of server and simulator, commits and statements, per request over the block."""
    commits, statements = rig.db_counts()
    server, sim = cpu_s(rig.server.pid), cpu_s(rig.sim.pid)
    writer = thread_cpu_s(rig.server.pid, "courier-store")
    yield
    out["server_ms"] = (cpu_s(rig.server.pid) - server) * 1000 / n
    out["writer_ms"] = (thread_cpu_s(rig.server.pid, "courier-store") - writer) * 1000 / n
    out["sim_ms"] = (cpu_s(rig.sim.pid) - sim) * 1000 / n
    after_commits, after_statements = rig.db_counts()
    # The /metrics read itself runs no SQL, so the deltas are the turns' own, plus any
    # search-index batch that fell inside the block (`--index-interval 0` leaves those out).
    out["commits"] = (after_commits - commits) / n
    out["statements"] = (after_statements - statements) / n


def _row(name: str, m: dict[str, float]) -> None:
    ratio = m["server_ms"] / m["sim_ms"] if m["sim_ms"] else float("nan")
    print(
        f"  {name:<26} {m['server_ms']:7.2f} ms CPU (store thread {m['writer_ms']:5.2f})  "
        f"(simulator {m['sim_ms']:5.2f} ms, ratio {ratio:5.1f}x)  "
        f"commits {m['commits']:5.1f}  statements {m['statements']:5.1f}"
    )


def bench_cpu(rig: Rig, n: int) -> None:
    print(f"CPU per request (server process, {n} sequential requests each, 40-chunk replies)")
    for _ in range(5):  # warm imports, caches and the upstream connection
        rig.turn()
    short, long_ = text_of(40), text_of(400)
    rig.script([{"reply": {"text": short}}] * n)
    new: dict[str, float] = {}
    sessions: list[str] = []
    with measured(rig, n, new):
        sessions = [rig.turn() for _ in range(n)]
    _row("new session", new)
    rig.script([{"reply": {"text": short}}] * n)
    cont: dict[str, float] = {}
    with measured(rig, n, cont):
        for sid in sessions:
            rig.turn(session=sid)
    _row("continued session", cont)
    steps: list[dict[str, Any]] = []
    for _ in range(n):
        call = {"name": "todo", "arguments": {"action": "add", "items": ["check the logs"]}}
        steps += [{"reply": {"tool_calls": [call]}}, {"reply": {"text": short}}]
    rig.script(steps)
    tool: dict[str, float] = {}
    with measured(rig, n, tool):
        for _ in range(n):
            rig.turn()
    _row("tool turn (2 upstream calls)", tool)
    rig.script([{"reply": {"text": long_}}] * n)
    big: dict[str, float] = {}
    with measured(rig, n, big):
        for _ in range(n):
            rig.turn()
    _row("new session, 400 chunks", big)
    per_chunk = (big["server_ms"] - new["server_ms"]) / 360 * 1000
    sim_chunk = (big["sim_ms"] - new["sim_ms"]) / 360 * 1000
    print(
        f"  CPU per chunk: {per_chunk:.1f} µs  (simulator {sim_chunk:.1f} µs, "
        f"ratio {per_chunk / sim_chunk if sim_chunk > 0 else float('nan'):.1f}x)"
    )


GROWTH_WINDOWS = 5


def bench_growth(rig: Rig, turns: int, window: int = 10) -> None:
    print(f"CPU per turn as one session grows (mean over {window} turns, text replies)")
    paired = 2 * window * GROWTH_WINDOWS + 1
    rig.script([{"reply": {"text": text_of(40)}}] * (2 * (turns + window + 10) + 2 * paired))
    # Warm the server on another session first, so the first window measures a short
    # session rather than the process's first requests (lazy imports, cold caches).
    warm = rig.turn()
    for _ in range(9):
        rig.turn(session=warm)
    sid = rig.turn()

    def by_id(n: int) -> None:
        rig.turn(f"Question number {n}: say something.", session=sid)

    def resender() -> Callable[[int], None]:
        history: list[dict[str, str]] = []

        def resent(n: int) -> None:
            # As every real client talks: no session id, the whole visible history each
            # time; Courier recognises the conversation it continues
            # (app/agent/opening/continuity.py, app/api/chat/resend.py).
            history.append({"role": "user", "content": f"Question number {n}: say something."})
            history.append({"role": "assistant", "content": rig.converse(history)[1]})

        return resent

    print("  by session id (X-Session-Id):")
    _growth(rig, turns, window, by_id)
    _paired(rig, turns, window, by_id)
    print("  the whole history resent each turn, as clients do (no session id):")
    resent = resender()
    resent(1)  # the new session, as `by_id`'s was made before its count
    _growth(rig, turns, window, resent)
    young = resender()
    young(1)
    _paired(rig, turns, window, resent, young)


def _growth(rig: Rig, turns: int, window: int, turn: Callable[[int], None]) -> None:
    at: dict[int, float] = {}
    started, counted = cpu_s(rig.server.pid), 0
    for n in range(2, turns + 1):
        turn(n)
        counted += 1
        if n % window == 0:
            # Divided by the turns actually measured: the first window starts at turn 2
            # (turn 1 creates the session), and dividing its 9 turns by 10 made turn 10
            # look ~10 % cheaper than it is.
            now = cpu_s(rig.server.pid)
            at[n] = (now - started) * 1000 / counted
            started, counted = now, 0
    # One window is about 30 ms of CPU on a shared machine: alone it swung 0.8-2.0x
    # between runs when read in 10 ms ticks. Five windows at each end average the noise.
    marks = sorted(at)
    early_marks, late_marks = marks[:GROWTH_WINDOWS], marks[-GROWTH_WINDOWS:]
    early = statistics.mean(at[n] for n in early_marks) if at else float("nan")
    late = statistics.mean(at[n] for n in late_marks) if at else float("nan")
    print(
        f"    turns {2 if at else 0}-{early_marks[-1] if at else 0}: {early:.2f} ms   "
        f"turns {late_marks[0] - window + 1 if at else 0}-{late_marks[-1] if at else 0}: "
        f"{late:.2f} ms   ratio {late / early:.2f}x   (means of {GROWTH_WINDOWS} windows each)"
    )


def _paired(
    rig: Rig,
    turns: int,
    window: int,
    grown: Callable[[int], None],
    young: Callable[[int], None] | None = None,
) -> None:
    """The growth figure side by side: blocks of `window` turns alternate between the grown
    session (its turns after `turns`) and a new one (its turns from 2; by session id unless
    `young` is given, already past its turn 1), so the machine's drift, which sequential
    windows half a minute apart read as growth, hits both alike."""
    if young is None:
        young_sid = rig.turn()

        def young(n: int) -> None:
            rig.turn(f"Question number {n}: say something.", session=young_sid)

    at = {"grown": turns + 1, "young": 2}
    cost: dict[str, list[float]] = {"grown": [], "young": []}
    for _ in range(GROWTH_WINDOWS):
        for name, turn in (("grown", grown), ("young", young)):
            started = cpu_s(rig.server.pid)
            for _ in range(window):
                turn(at[name])
                at[name] += 1
            cost[name].append((cpu_s(rig.server.pid) - started) * 1000 / window)
    late, early = statistics.mean(cost["grown"]), statistics.mean(cost["young"])
    print(
        f"    alternating {window}-turn blocks: turns 2-{at['young'] - 1} of a new session "
        f"{early:.2f} ms   turns {turns + 1}-{at['grown'] - 1} of this one {late:.2f} ms   "
        f"ratio {late / early:.2f}x"
    )


def hello_body(model: str) -> dict[str, Any]:
    return {"model": model, "stream": True, "messages": [{"role": "user", "content": "Hi."}]}


def first_token_s(
    client: httpx.Client, url: str, auth: dict[str, str], body: dict[str, Any]
) -> float:
    started = time.perf_counter()
    ttft = None
    with client.stream("POST", url, json=body, headers=auth) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if ttft is None and has_content(line):
                ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError("stream ended without content")
    return ttft


class _Caller:
    """One keep-alive HTTP/1.1 connection that posts a streamed request and reads it.

    The load generator shares the machine's two cores with the simulator and the server;
    httpx spends about 25 µs of CPU per chunk, so a hundred httpx streams would take a
    core of their own and the figure would measure the generator. This reads the raw bytes.
    """

    def __init__(self, url: str, auth: dict[str, str]) -> None:
        parts = httpx.URL(url)
        self.host, self.port, self.path = parts.host, parts.port or 80, parts.raw_path
        self.auth = auth["Authorization"].encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def first_token(self, body: bytes) -> float | None:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        started = time.perf_counter()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (self.path, self.host.encode(), self.auth, len(body), body)
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        ttft = None
        pending = b""
        while True:  # chunked transfer coding, read to the last chunk
            size = int((await self.reader.readline()).strip(), 16)
            data = await self.reader.readexactly(size + 2)
            if size == 0:
                return ttft
            if ttft is None:
                pending += data[:-2]
                *lines, pending = pending.split(b"\n")
                if any(has_content(line.decode()) for line in lines):
                    ttft = time.perf_counter() - started


async def loaded_ttfts(
    url: str,
    model: str,
    auth: dict[str, str],
    workers: int,
    seconds: float,
    fixed: dict[str, Any] | None = None,
) -> list[float]:
    """TTFT samples of `workers` callers for `seconds`; `fixed`: send this body every time
    (the direct baseline, where no retry detection reads it)."""
    samples: list[float] = []
    deadline = time.monotonic() + seconds
    sent = itertools.count()

    async def worker(delay: float) -> None:
        await asyncio.sleep(delay)  # staggered, so new requests arrive at an even rate
        caller = _Caller(url, auth)
        while time.monotonic() < deadline:
            # A different question each time, as a hundred callers ask: one principal's
            # byte-identical body while its twin still runs is a retry by design (it
            # attaches to that turn), and such requests open one at a time.
            content = f"Hi, this is caller {next(sent)}."
            body = fixed or {
                "model": model,
                "stream": True,
                "messages": [{"role": "user", "content": content}],
            }
            ttft = await caller.first_token(json.dumps(body).encode())
            if ttft is not None:
                samples.append(ttft)
        if caller.writer is not None:
            caller.writer.close()

    await asyncio.gather(*(worker(i * 2.0 / workers) for i in range(workers)))
    return samples


def load_limits(streams: int) -> dict[str, str]:
    """Settings for a load run: it measures capacity, not the safety caps (one client
    address opening 1,000 streams would otherwise meet the per-IP and concurrent-turn
    limits)."""
    return {
        "COURIER_MAX_CONCURRENT_TURNS": str(streams + 16),
        "COURIER_MAX_CONNECTIONS_PER_IP": "0",
    }


def bench_ttft(rig: Rig, n: int, workers: int, seconds: float) -> None:
    print("Added time to first token (through Courier minus the simulator called directly)")
    direct: list[float] = []
    through: list[float] = []
    rig.reset()
    for _ in range(3):
        first_token_s(rig.http, rig.url, rig.auth, hello_body("courier"))
    # The baseline is the simulator answering the very request Courier sends it (the
    # session's system prompt and tool schemas, about 7 KB): a bare "Hi." would charge the
    # simulator's own work on the bigger body (about 1 ms) to Courier.
    upstream = rig.upstream_body()
    for _ in range(3):
        first_token_s(rig.http, rig.direct_url, rig.auth, upstream)
    for _ in range(n):  # interleaved, so drift hits both alike
        direct.append(first_token_s(rig.http, rig.direct_url, rig.auth, upstream))
        through.append(first_token_s(rig.http, rig.url, rig.auth, hello_body("courier")))
    d50, t50 = statistics.median(direct), statistics.median(through)
    print(
        f"  (direct: the {len(json.dumps(upstream)) / 1024:.1f} KB request Courier sends upstream)"
    )
    print(
        f"  concurrency 1:   direct p50 {d50 * 1000:6.2f} ms   courier p50 {t50 * 1000:6.2f} ms"
        f"   added p50 {(t50 - d50) * 1000:6.2f} ms   (ratio {t50 / d50:.2f}x, n={n})"
    )
    # 40 words at 20 tokens/s: 2-second streams, as a voice client's replies are.
    rig.configure(tokens_per_second=20)
    try:
        direct = asyncio.run(
            loaded_ttfts(rig.direct_url, "gpt-4o-mini", rig.auth, workers, seconds, fixed=upstream)
        )
        before, gc_before = cpu_s(rig.server.pid), rig.gc_pauses()
        through = asyncio.run(loaded_ttfts(rig.url, "courier", rig.auth, workers, seconds))
        busy = (cpu_s(rig.server.pid) - before) / seconds
        gc_after = rig.gc_pauses()
    finally:
        rig.reset()
    d50, d99 = statistics.median(direct), pct(direct, 0.99)
    t50, t99 = statistics.median(through), pct(through, 0.99)
    print(
        f"  concurrency {workers}: direct p50 {d50 * 1000:6.1f} p99 {d99 * 1000:6.1f} ms   "
        f"courier p50 {t50 * 1000:6.1f} p99 {t99 * 1000:6.1f} ms   "
        f"added p50 {(t50 - d50) * 1000:6.1f} ms p99 {(t99 - d99) * 1000:6.1f} ms   "
        f"(n={len(through)}, {len(through) / seconds:.0f} req/s, "
        f"server {busy * 100:.0f}% of a core)"
    )
    # Every stream stalls while a collection holds the interpreter: the tail's share.
    parts = []
    for generation, (count, total, long_) in sorted(gc_after.items()):
        was = gc_before.get(generation, (0.0, 0.0, 0.0))
        parts.append(
            f"gen{generation} {count - was[0]:.0f} ({(total - was[1]) * 1000:.0f} ms, "
            f"{long_ - was[2]:.0f} over 10 ms)"
        )
    print(f"  server GC passes during the {workers}-stream load: " + ", ".join(parts))


def bench_conns(rig: Rig, n: int) -> None:
    print("Upstream connections")
    rig.reset()
    for _ in range(3):
        rig.turn()
    warm = rig.connections()
    for _ in range(n):
        rig.turn()
    new = rig.connections() - warm
    print(f"  new upstream connections per request after warm-up: {new / n:.2f} ({new} in {n})")


async def _open_streams(rig: Rig, count: int, wait_s: float) -> tuple[int, float]:
    """Open `count` streams, wait until each has its first token; (live, RSS MB then)."""
    limits = httpx.Limits(max_connections=count + 10, max_keepalive_connections=0)
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "Hi."}]}
    live = 0
    all_live = asyncio.Event()

    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def one() -> None:
            nonlocal live
            async with client.stream("POST", rig.url, json=body, headers=rig.auth) as resp:
                async for line in resp.aiter_lines():
                    if has_content(line):
                        live += 1
                        if live == count:
                            all_live.set()
                        await asyncio.sleep(3600)  # hold the stream open

        tasks = [asyncio.create_task(one()) for _ in range(count)]
        with suppress(TimeoutError):
            await asyncio.wait_for(all_live.wait(), wait_s)
        await asyncio.sleep(1)
        rss = rss_mb(rig.server.pid)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return live, rss


def bench_rss(rig: Rig, count: int, wait_s: float) -> None:
    print(f"RSS with {count} open streams")
    rig.reset()
    idle = rss_mb(rig.server.pid)
    # One token every 2 s: every stream is still running upstream when RSS is read.
    rig.configure(tokens_per_second=0.5)
    try:
        started = time.monotonic()
        live, rss = asyncio.run(_open_streams(rig, count, wait_s))
        took = time.monotonic() - started
    finally:
        rig.reset()
    print(
        f"  {live}/{count} streams live (first token received) within {took:.0f} s; "
        f"server RSS {rss:.0f} MB (idle {idle:.0f} MB, {(rss - idle) * 1024 / max(live, 1):.0f}"
        " KB per live stream)"
    )
    time.sleep(2)  # let the server finish cancelling the turns before the next section


def bench_kept(turns: int) -> None:
    """What a finished turn leaves in the server's memory: its events are kept for a
    retry's reattach and `/v1/sessions/{id}/events` (up to 10,000 turns). A server of its
    own: after another section's load, freed memory would absorb the growth unseen."""
    print(f"Memory kept per finished turn ({turns} new sessions, 40-chunk answers)")
    rig = Rig()
    try:
        _kept(rig, turns)
    finally:
        rig.close()


def _kept(rig: Rig, turns: int) -> None:
    answer = text_of(40)
    warm = 200  # past the first requests' one-off allocations (imports, caches, pools)
    rig.script([{"reply": {"text": answer}}] * (warm + turns))
    for i in range(warm):
        rig.turn(content=f"warm-up {i}")
    before = rss_mb(rig.server.pid)
    for i in range(turns):
        rig.turn(content=f"question {i}")
    per_turn = (rss_mb(rig.server.pid) - before) * 1024 / turns
    print(
        f"  server RSS +{per_turn:.1f} KB per finished turn "
        f"(its answer {len(answer)} B, ratio {per_turn * 1024 / len(answer):.0f}x)"
    )


# ---------------------------------------------------------------------------- search


def build_search_db(path: Path, rows: int, owners: int, per_session: int) -> None:
    """A database of `rows` messages over `owners` keys, made by the app's own schema
    (SQLAlchemy Core inserts on the SQLModel tables, so column defaults apply)."""
    sys.path.insert(0, str(REPO_ROOT))
    from app.db.models import MessageRow, SessionRow
    from app.db.store import Store

    store = Store.open(path)
    rng = random.Random(7)
    vocab = [f"w{i:04d}" for i in range(5000)]
    sessions = rows // per_session
    session_table = SessionRow.__table__  # type: ignore[attr-defined]
    message_table = MessageRow.__table__  # type: ignore[attr-defined]
    with store.engine.begin() as conn:
        conn.execute(
            session_table.insert(),
            [
                {
                    "id": f"s{i:07d}",
                    "owner": f"owner{i % owners:04d}",
                    "profile": "courier",
                    "system_prompt": "",
                    "started_at": 1e9 + i,
                }
                for i in range(sessions)
            ],
        )
        batch: list[dict[str, Any]] = []
        for i in range(rows):
            words = rng.choices(vocab, k=12)
            if i % 10 == 0:
                words.append("deploy")  # a common term: 10 % of all rows, every owner
            if i % 100_000 == 0:
                words.append("zebracorn")  # a rare one
            role = "user" if i % 2 == 0 else "assistant"
            batch.append(
                {"session_id": f"s{i // per_session:07d}", "role": role, "content": " ".join(words)}
            )
            if len(batch) == 50_000:
                conn.execute(message_table.insert(), batch)
                batch.clear()
        if batch:
            conn.execute(message_table.insert(), batch)
    store.index_for_search()  # new rows reach the full-text index in batches
    store.close()


def bench_search(rows: int, repeats: int) -> None:
    print(f"session_search at {rows:,} message rows")
    sys.path.insert(0, str(REPO_ROOT))
    from app.db.store import Store
    from app.db.tool_store import search_sessions

    cache = Path(tempfile.gettempdir()) / "courier-bench" / f"search-{rows}.db"
    cache.parent.mkdir(exist_ok=True)
    if not cache.exists():
        started = time.monotonic()
        partial = cache.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        build_search_db(partial, rows, owners=1000, per_session=100)
        partial.rename(cache)
        print(f"  built the database in {time.monotonic() - started:.0f} s ({cache})")
    started = time.monotonic()
    store = Store.open(cache)  # runs any migration a newer schema needs
    print(f"  opened (with migrations) in {time.monotonic() - started:.2f} s")

    def timed(terms: list[str]) -> list[float]:
        samples = []
        for i in range(repeats):
            t = time.perf_counter()
            search_sessions(
                store, owner=f"owner{(i * 37) % 1000:04d}", end_user="", terms=terms, limit=5
            )
            samples.append(time.perf_counter() - t)
        return samples

    try:
        rare = timed(["zebracorn"])
        common = timed(["deploy"])
        two = timed(["deploy", "w0042"])
    finally:
        store.close()
    r50 = statistics.median(rare)
    for name, samples in (("common term", common), ("two terms", two), ("rare term", rare)):
        p50 = statistics.median(samples)
        print(
            f"  {name:<12} p50 {p50 * 1000:8.2f} ms   p90 {pct(samples, 0.9) * 1000:8.2f} ms   "
            f"(ratio to the rare term {p50 / r50:6.1f}x, n={len(samples)})"
        )


SECTIONS = ("cpu", "growth", "ttft", "conns", "rss", "kept", "search")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(SECTIONS))
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--turns", type=int, default=250)
    parser.add_argument(
        "--window",
        type=int,
        default=10,
        help="turns averaged per growth figure",
    )
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--kept", type=int, default=2000, help="turns for the kept section")
    parser.add_argument("--wire", choices=sorted(WIRES), default="openai")
    parser.add_argument(
        "--index-interval",
        help="COURIER_SEARCH_INDEX_INTERVAL_S for the server (default: the product's); 0 leaves"
        " indexing to the first search, so commits per request are the turns' own, as"
        " tests/e2e/test_turn_commits.py counts them (a batch landing inside a slow block"
        " would add a fraction of one)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if unknown := only - set(SECTIONS):
        raise SystemExit(f"unknown sections: {', '.join(sorted(unknown))}")
    sections: list[tuple[str, Callable[[Rig], None]]] = [
        ("cpu", lambda rig: bench_cpu(rig, args.requests)),
        ("growth", lambda rig: bench_growth(rig, args.turns, args.window)),
        ("ttft", lambda rig: bench_ttft(rig, 40, args.workers, args.seconds)),
        ("conns", lambda rig: bench_conns(rig, 20)),
        ("rss", lambda rig: bench_rss(rig, args.streams, 90)),
    ]
    wanted = [(name, run) for name, run in sections if name in only]
    if wanted:
        extra_env = load_limits(max(args.workers, args.streams))
        if args.index_interval is not None:
            extra_env["COURIER_SEARCH_INDEX_INTERVAL_S"] = args.index_interval
        rig = Rig(extra_env=extra_env, wire=args.wire)
        try:
            for _name, run in wanted:
                run(rig)
                rig.reset()
        finally:
            rig.close()
    if "kept" in only:
        bench_kept(args.kept)
    if "search" in only:
        bench_search(args.rows, 20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
