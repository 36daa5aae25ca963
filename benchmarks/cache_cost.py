"""Input cost of a long tool-heavy session under three cache strategies, against the floor.

A scripted session (each turn: a user message, a read_file or list_files call on a workspace
of source files of a few KB, then a text answer) runs through the real server against the
simulator on the Anthropic wire, once per strategy: `none` (no markers), `naive` (markers on
the last four messages) and `planner` (Courier's). The simulator bills like Anthropic:
breakpoints, the 20-block lookback, the 5 m TTL (the clock never moves, so nothing expires)
and the 1,024-token minimum. The floor comes from the planner run's own request bodies: the
longest leading run of segments already sent in an earlier request is billed at the
cache-read rate, everything else at the cache-write rate.

Only input-side buckets are priced (fresh input, cache read, cache write); output is the
same for every strategy and would only dilute the comparison. Prints figures and the issue's
targets as PASS/MISS; asserts nothing.

    .venv/bin/python benchmarks/cache_cost.py [--turns 100]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
from _harness import bench_key, free_port, start_server, start_simulator, stop, wait_http

from app.providers.pricing import price_usage, prices_version
from app.providers.usage import Usage
from app.simulator import anthropic_wire
from app.simulator.token_count import segment_digests

MODEL = "claude-sonnet-4-5"
PROVIDER = "anthropic"
STRATEGIES = ("none", "naive", "planner")
MIN_CACHEABLE_TOKENS = 1024
PACKAGES = ("billing", "ingest", "render", "storage", "auth", "queue", "search", "report")
MODULES_PER_PACKAGE = 13

# Targets from issue 4, measured as ratios within one run.
TARGET_VS_FLOOR = 1.10
TARGET_VS_NONE = 0.25
TARGET_READ_SHARE = 0.85

_VOCABULARY = (
    "account amount batch buffer cache channel chunk client config cursor deadline digest "
    "entry event field frame handle header index invoice item key ledger limit line marker "
    "offset owner page parser payload policy prefix queue record region result retry row "
    "schema session shard signal snapshot source span state status stream table tenant "
    "token total unit user value version window worker"
)
_WORDS = tuple(_VOCABULARY.split())


# ------------------------------------------------------------------------------ workspace


def _module_source(package: str, index: int) -> str:
    """A plausible Python module of roughly 2.5-4 KB, different for every (package, index)."""
    rng = random.Random(f"{package}/{index}")
    words = rng.sample(_WORDS, 12)
    lines = [
        f"# src/{package}/mod{index:02d}.py",
        f'"""{package.title()} {words[0]} and {words[1]} handling (part {index}).',
        "",
        f"Keeps each {words[2]} consistent with its {words[3]} across retries.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "import dataclasses",
        "import logging",
        "",
        "log = logging.getLogger(__name__)",
        f"MAX_{words[4].upper()}S = {rng.randint(8, 4096)}",
        "",
    ]
    for f in range(rng.randint(5, 7)):
        name = f"{rng.choice(words)}_{rng.choice(words)}_{f}"
        a, b = rng.sample(words, 2)
        lines += [
            "",
            f"def {name}({a}: dict[str, int], {b}: int = {rng.randint(1, 99)}) -> int:",
            f'    """Return the {rng.choice(words)} of `{a}` capped at `{b}`."""',
            "    total = 0",
            f"    for key, value in sorted({a}.items()):",
            f"        if value > {b}:",
            f'            log.debug("{name}: %s over limit (%d)", key, value)',
            "            continue",
            f"        total += value * {rng.randint(2, 9)}",
            f"    return min(total, MAX_{words[4].upper()}S)",
        ]
    lines += [
        "",
        "",
        "@dataclasses.dataclass(frozen=True)",
        f"class {words[5].title()}{words[6].title()}:",
        f"    {words[7]}: str",
        f"    {words[8]}: int = 0",
        f"    {words[9]}: tuple[str, ...] = ()",
    ]
    return "\n".join(lines) + "\n"


def _build_workspace(root: Path) -> list[str]:
    """Write the workspace; returns the module paths in the order the session reads them."""
    paths: list[str] = []
    for package in PACKAGES:
        directory = root / "src" / package
        directory.mkdir(parents=True)
        (directory / "__init__.py").write_text(f'"""The {package} package."""\n')
        for index in range(MODULES_PER_PACKAGE):
            (directory / f"mod{index:02d}.py").write_text(_module_source(package, index))
            paths.append(f"src/{package}/mod{index:02d}.py")
    (root / "README.md").write_text("# demo service\n\nEight packages under src/.\n")
    # Interleave packages so consecutive turns touch different parts of the tree.
    return sorted(paths, key=lambda p: (int(p[-5:-3]), p))


# ------------------------------------------------------------------------------ session


@dataclass(frozen=True)
class Turn:
    user: str
    tool: dict[str, Any]
    expect_result: str
    answer: str


def _turns(count: int, modules: list[str]) -> list[Turn]:
    turns: list[Turn] = []
    for n in range(1, count + 1):
        rng = random.Random(n)
        if n % 6 == 0:  # every sixth turn lists a package instead of reading a file
            package = PACKAGES[(n // 6) % len(PACKAGES)]
            tool = {"name": "list_files", "arguments": {"path": f"src/{package}"}}
            user = f"step {n}: what modules does src/{package} contain?"
            expect = "mod00.py"
        else:
            path = modules[(n - 1) % len(modules)]
            arguments: dict[str, Any] = {"path": path}
            if n > len(modules):  # a second pass pages instead of re-reading whole files
                arguments |= {"offset": 1 + n % 20, "limit": 40}
            tool = {"name": "read_file", "arguments": arguments}
            user = f"step {n}: open {path} and tell me what it does."
            expect = path if n <= len(modules) else "of"
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(40, 70)))
        answer = f"Step {n} done. Summary: {words}."
        turns.append(Turn(user, tool, expect, answer))
    return turns


def _script(turns: list[Turn]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for n, turn in enumerate(turns, start=1):
        steps.append(
            {"expect": {"last_user_contains": f"step {n}:"}, "reply": {"tool_calls": [turn.tool]}}
        )
        steps.append(
            {
                "expect": {"last_tool_result_contains": turn.expect_result},
                "reply": {"text": turn.answer},
            }
        )
    return steps


# ------------------------------------------------------------------------------ accounting


@dataclass
class Tally:
    calls: int = 0
    fresh: int = 0
    read: int = 0
    write: int = 0
    cost: Decimal | None = Decimal(0)

    @property
    def prompt(self) -> int:
        return self.fresh + self.read + self.write

    @property
    def read_share(self) -> float:
        return self.read / self.prompt if self.prompt else 0.0

    def add(self, fresh: int, read: int, write: int) -> None:
        # Priced per call, as the server does: tiers and request fees apply per request.
        usage = Usage(input_tokens=fresh, cache_read_tokens=read, cache_write_tokens=write)
        cost = price_usage(usage, model=MODEL, provider=PROVIDER)
        self.calls += 1
        self.fresh += fresh
        self.read += read
        self.write += write
        self.cost = None if self.cost is None or cost.amount is None else self.cost + cost.amount


def _ledger(
    client: httpx.Client, base: str, sid: str, auth: dict[str, str]
) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = client.get(
            f"{base}/v1/sessions/{sid}/usage",
            params={"limit": 100, "offset": offset},
            headers=auth,
        )
        page.raise_for_status()
        body = page.json()
        calls += body["calls"]
        offset += len(body["calls"])
        if not body["has_more"]:
            return calls


def _floor(bodies: list[dict[str, Any]]) -> Tally:
    """Every leading run of segments already sent (nothing expires) read, the rest written."""
    floor = Tally()
    seen: set[str] = set()
    for body in bodies:
        segments = anthropic_wire.parse(body).segments
        digests = segment_digests("floor", segments)
        shared = 0
        for segment, digest in zip(segments, digests, strict=True):
            if digest not in seen:
                break
            shared += segment.tokens
        total = sum(s.tokens for s in segments)
        floor.add(0, shared, total - shared)
        seen.update(digests)
    return floor


# ------------------------------------------------------------------------------ runs


def _run(
    strategy: str, sim_url: str, workspace: Path, turns: list[Turn]
) -> tuple[Tally, list[dict[str, Any]]]:
    """One session through a fresh server; returns its ledger totals and the request bodies."""
    with httpx.Client(timeout=60) as sim:
        sim.post(f"{sim_url}/_sim/reset", json={}).raise_for_status()
        # Stated, not assumed: the run is only comparable at Anthropic's real minimum.
        sim.post(
            f"{sim_url}/_sim/config", json={"min_cacheable_tokens": MIN_CACHEABLE_TOKENS}
        ).raise_for_status()
        sim.post(f"{sim_url}/_sim/script", json=_script(turns)).raise_for_status()
    port, key = free_port(), bench_key()
    data = Path(tempfile.mkdtemp(prefix=f"courier-cache-{strategy}-"))
    env = {
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": str(data),
        "COURIER_UPSTREAM_PROVIDER": PROVIDER,
        "COURIER_UPSTREAM_BASE_URL": sim_url,
        "COURIER_UPSTREAM_API_KEY": "bench",
        "COURIER_UPSTREAM_MODEL": MODEL,
        "COURIER_CONTEXT_WINDOW": "200000",
        "COURIER_CACHE_STRATEGY": strategy,
        "COURIER_WORKSPACE": str(workspace),
        "COURIER_LOG_LEVEL": "warning",
    }
    log = data / "server.log"
    server = start_server(env, inherit_courier_env=False, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{base}/health")
        auth = {"Authorization": f"Bearer {key}"}
        sid: str | None = None
        with httpx.Client(timeout=120) as client:
            for turn in turns:
                headers = {**auth, **({"X-Session-Id": sid} if sid else {})}
                body = {"model": "courier", "messages": [{"role": "user", "content": turn.user}]}
                resp = client.post(f"{base}/v1/chat/completions", json=body, headers=headers)
                if resp.status_code != 200:
                    raise SystemExit(
                        f"[{strategy}] {turn.user!r}: HTTP {resp.status_code} {resp.text}\n"
                        + log.read_text(errors="replace")[-4000:]
                    )
                sid = resp.headers["x-session-id"]
            assert sid is not None
            ledger = _ledger(client, base, sid, auth)
            status = client.get(f"{sim_url}/_sim/script").json()
            if status["failures"] or status["remaining"]:
                raise SystemExit(f"[{strategy}] script not followed: {status}")
            recorded = client.get(f"{sim_url}/_sim/requests", params={"path": "/v1/messages"})
            recorded.raise_for_status()
            bodies = [json.loads(r["body"]) for r in recorded.json()]
    finally:
        stop(server)
        shutil.rmtree(data, ignore_errors=True)
    if len(ledger) != len(bodies):
        raise SystemExit(f"[{strategy}] {len(ledger)} ledger rows for {len(bodies)} requests")
    tally = Tally()
    for call in ledger:
        tally.add(call["input_tokens"], call["cache_read_tokens"], call["cache_write_tokens"])
    return tally, bodies


# ------------------------------------------------------------------------------ report


def _usd(amount: Decimal | None) -> str:
    return "unknown" if amount is None else f"${amount:,.4f}"


def _ratio(a: Decimal | None, b: Decimal | None) -> float | None:
    return None if a is None or b is None or b == 0 else float(a / b)


def _verdict(ok: bool | None) -> str:
    return "n/a (cost unknown)" if ok is None else ("PASS" if ok else "MISS")


def _report(results: dict[str, Tally], floor: Tally, turns: int, elapsed: float) -> None:
    calls = results["planner"].calls
    print(
        f"cache cost: {turns} turns, {calls} upstream calls per strategy, model {MODEL} "
        f"(Anthropic wire), min cacheable {MIN_CACHEABLE_TOKENS} tokens, clock never advanced"
    )
    print(
        f"input cost = fresh + cache read + cache write at {prices_version()} rates; "
        "output tokens excluded (priced at 0)"
    )
    print()
    header = (
        f"{'strategy':<14}{'prompt':>11}{'fresh':>11}{'read':>11}{'write':>10}"
        f"{'input cost':>13}{'read share':>12}{'cost/floor':>12}"
    )
    print(header)
    print("-" * len(header))
    for name, tally in [*results.items(), ("floor", floor)]:
        ratio = _ratio(tally.cost, floor.cost)
        print(
            f"{name:<14}{tally.prompt:>11,}{tally.fresh:>11,}{tally.read:>11,}"
            f"{tally.write:>10,}{_usd(tally.cost):>13}{tally.read_share * 100:>11.1f}%"
            f"{'n/a' if ratio is None else f'{ratio:.3f}':>12}"
        )
    print()
    ours = results["planner"]
    vs_floor = _ratio(ours.cost, floor.cost)
    vs_none = _ratio(ours.cost, results["none"].cost)
    print(
        f"courier / floor      = {'n/a' if vs_floor is None else f'{vs_floor:.3f}'}"
        f"   target <= {TARGET_VS_FLOOR:.2f}   "
        f"{_verdict(None if vs_floor is None else vs_floor <= TARGET_VS_FLOOR)}"
    )
    print(
        f"courier / no markers = {'n/a' if vs_none is None else f'{vs_none:.3f}'}"
        f"   target <= {TARGET_VS_NONE:.2f}   "
        f"{_verdict(None if vs_none is None else vs_none <= TARGET_VS_NONE)}"
    )
    print(
        f"courier read share   = {ours.read_share * 100:.1f} %"
        f"   target >= {TARGET_READ_SHARE * 100:.0f} %   "
        f"{_verdict(ours.read_share >= TARGET_READ_SHARE)}"
    )
    print(f"(wall time {elapsed:.1f} s)")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    started = time.monotonic()
    workspace = Path(tempfile.mkdtemp(prefix="courier-cache-ws-"))
    turns = _turns(args.turns, _build_workspace(workspace))
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    sim = start_simulator(sim_port)
    try:
        wait_http(f"{sim_url}/v1/models")
        results: dict[str, Tally] = {}
        planner_bodies: list[dict[str, Any]] = []
        for strategy in STRATEGIES:
            results[strategy], bodies = _run(strategy, sim_url, workspace, turns)
            if strategy == "planner":
                planner_bodies = bodies
    finally:
        stop(sim)
        shutil.rmtree(workspace, ignore_errors=True)
    _report(results, _floor(planner_bodies), args.turns, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
