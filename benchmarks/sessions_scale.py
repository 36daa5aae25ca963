"""One key with 100,000 sessions: search and the sessions list, against a key with 20.

Issue 30 found a key's costs growing with everything it had ever stored: `session_search`
for a common word ranked every match the key had (981 ms), and the sessions list sorted
all its sessions for the first page (74 ms) and walked half of them for a deep one.

This builds (once, cached under the temp dir) a database of 100,000 sessions, 400,000
messages, 200,000 turns and 200,000 upstream calls under one key, plus 20 sessions of a
second key spread among them (its messages interleaved with the big key's, as a small
tenant's are). It starts the real server on a copy and measures over HTTP, for each key:

* search, the route the console uses (the same `search_sessions` the `session_search`
  tool runs): a common word (10 % of all messages), two words, a rare word;
* `GET /v1/sessions`: the first page, and a page by `after=` from the middle of the list
  (50,000 sessions deep for the big key).

It prints wall-clock p50/p90 over `--runs` requests and the server's CPU per request,
and for the big key the ratio to the small key's figure measured in the same run, side
by side (requests alternate between the keys). Figures only; nothing is asserted.

    .venv/bin/python benchmarks/sessions_scale.py [--runs 20] [--sessions 100000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _harness import REPO_ROOT, free_port, start_server, start_simulator, stop, wait_http

sys.path.insert(0, str(REPO_ROOT))

from app.security.auth import fingerprint

TICK = os.sysconf("SC_CLK_TCK")
BIG_KEY = "bench-scale-" + hashlib.sha256(b"courier sessions_scale big").hexdigest()[:40]
SMALL_KEY = "bench-scale-" + hashlib.sha256(b"courier sessions_scale small").hexdigest()[:40]
"""Fixed keys: the cached database's sessions belong to their fingerprints."""
MESSAGES_PER_SESSION = 4
SMALL_SESSIONS = 20
COMMON, SECOND, RARE = "deploy", "w0042", "zebracorn"


def _owners(sessions: int) -> list[str]:
    """The owner of each session in start order: the small key's spread evenly."""
    big, small = fingerprint(BIG_KEY), fingerprint(SMALL_KEY)
    every = max(1, sessions // SMALL_SESSIONS)
    owners: list[str] = []
    for i in range(sessions):
        owners.append(big)
        if i % every == every - 1 and i // every < SMALL_SESSIONS:
            owners.append(small)
    return owners


def build(path: Path, sessions: int) -> None:
    """The database, made by the app's own schema (Core inserts on the SQLModel tables,
    so column defaults apply), then indexed for search as the server would."""
    from app.db.models import ApiCallRow, MessageRow, SessionRow, TurnRow
    from app.db.store import Store

    store = Store.open(path)
    rng = random.Random(30)
    vocab = [f"w{i:04d}" for i in range(5000)]
    owners = _owners(sessions)
    small_owner = fingerprint(SMALL_KEY)
    tables = [r.__table__ for r in (SessionRow, TurnRow, ApiCallRow, MessageRow)]  # type: ignore[attr-defined]
    session_t, turn_t, call_t, message_t = tables
    small_seen = 0
    with store.engine.begin() as conn:
        conn.execute(
            session_t.insert(),
            [
                {
                    "id": f"s{i:07d}",
                    "owner": owner,
                    "profile": "courier",
                    "system_prompt": "",
                    "started_at": 1e9 + i,
                    "updated_at": 1e9 + i,
                }
                for i, owner in enumerate(owners)
            ],
        )
        # Finished turns: an unfinished one is a dead process's, repaired at startup.
        turns = [
            {
                "id": f"t{i:07d}_{k}",
                "session_id": f"s{i:07d}",
                "started_at": 1e9 + i,
                "finished_at": 1e9 + i + 1,
                "exit_reason": "final",
                "iterations": 1,
            }
            for i in range(len(owners))
            for k in range(2)
        ]
        conn.execute(turn_t.insert(), turns)
        calls = [
            {
                "session_id": f"s{i:07d}",
                "turn_id": f"t{i:07d}_{k}",
                "owner": owner,
                "profile": "courier",
                "upstream_model": "gpt-4o-mini",
                "input_tokens": 100,
                "output_tokens": 40,
                "cost_usd": "0.0001",
                "cost_status": "estimated",
                "cost_source": "bench",
            }
            for i, owner in enumerate(owners)
            for k in range(2)
        ]
        conn.execute(call_t.insert(), calls)
        batch: list[dict[str, Any]] = []
        n = 0
        for i, owner in enumerate(owners):
            small = owner == small_owner
            small_seen += small
            for k in range(MESSAGES_PER_SESSION):
                words = rng.choices(vocab, k=12)
                if n % 10 == 0:
                    words.append(COMMON)  # 10 % of every key's messages
                if k == 0 and (i % 25_000 == 0 or (small and small_seen == 7)):
                    words.append(RARE)  # four sessions of the big key, one of the small
                role = "user" if k % 2 == 0 else "assistant"
                batch.append({"session_id": f"s{i:07d}", "role": role, "content": " ".join(words)})
                n += 1
            if len(batch) >= 50_000:
                conn.execute(message_t.insert(), batch)
                batch.clear()
        if batch:
            conn.execute(message_t.insert(), batch)
    store.index_for_search()
    store.close()


def cached_db(sessions: int) -> Path:
    cache = Path(tempfile.gettempdir()) / "courier-bench" / f"sessions-scale-{sessions}.db"
    cache.parent.mkdir(exist_ok=True)
    if not cache.exists():
        started = time.monotonic()
        partial = cache.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        build(partial, sessions)
        partial.rename(cache)
        print(f"built the database in {time.monotonic() - started:.0f} s ({cache})")
    return cache


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Figure:
    wall: list[float]
    cpu_ms: float

    @property
    def p50(self) -> float:
        return statistics.median(self.wall) * 1000

    @property
    def p90(self) -> float:
        return sorted(self.wall)[max(0, int(len(self.wall) * 0.9) - 1)] * 1000


class Server:
    def __init__(self, db: Path) -> None:
        self.data = Path(tempfile.mkdtemp(prefix="courier-scale-"))
        shutil.copyfile(db, self.data / "courier.db")
        config = self.data / "keys.toml"
        config.write_text(f'[[keys]]\nname = "small"\nkey = "{SMALL_KEY}"\n')
        self.sim_port, self.port = free_port(), free_port()
        self.sim = start_simulator(self.sim_port)
        env = {
            "COURIER_API_KEY": BIG_KEY,
            "COURIER_CONFIG": str(config),
            "COURIER_PORT": str(self.port),
            "COURIER_DATA_DIR": str(self.data),
            "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{self.sim_port}/v1",
            "COURIER_UPSTREAM_API_KEY": "bench",
            "COURIER_LOG_LEVEL": "warning",
        }
        self.proc = start_server(env, inherit_courier_env=False)
        try:
            wait_http(f"http://127.0.0.1:{self.port}/health", 120)
        except SystemExit:
            stop(self.proc, self.sim)
            raise
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)

    def get(self, key: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
        resp = self.http.get(path, params=params, headers={"Authorization": f"Bearer {key}"})
        resp.raise_for_status()
        body: dict[str, Any] = resp.json()
        return body

    def close(self) -> None:
        self.http.close()
        stop(self.proc, self.sim)
        shutil.rmtree(self.data, ignore_errors=True)


def measure(
    server: Server, runs: int, requests: dict[str, tuple[str, str, dict[str, Any]]]
) -> dict[str, Figure]:
    """Each request `runs` times, round robin (so both keys see the same machine), after
    two unmeasured warm-up rounds."""
    for _ in range(2):
        for key, path, params in requests.values():
            server.get(key, path, params)
    walls: dict[str, list[float]] = {name: [] for name in requests}
    cpu: dict[str, float] = dict.fromkeys(requests, 0.0)
    for _ in range(runs):
        for name, (key, path, params) in requests.items():
            before, started = cpu_s(server.proc.pid), time.perf_counter()
            server.get(key, path, params)
            walls[name].append(time.perf_counter() - started)
            cpu[name] += cpu_s(server.proc.pid) - before
    return {name: Figure(walls[name], cpu[name] / runs * 1000) for name in requests}


def deep_cursor(server: Server, key: str, depth: int) -> str:
    """The id of the session `depth` places down the key's list, found by paging with
    the largest page (what a client paging there would hold as its cursor)."""
    after: str | None = None
    seen = 0
    while True:
        page = server.get(
            key, "/v1/sessions", {"limit": 100, **({"after": after} if after else {})}
        )
        if seen + len(page["data"]) >= depth or not page["has_more"]:
            return str(page["data"][min(depth - seen, len(page["data"])) - 1]["id"])
        seen += len(page["data"])
        after = page["next_cursor"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    db = cached_db(args.sessions)
    server = Server(db)
    try:
        # The deep cursor by the big key's order: every 100th session id is known, so no
        # need to page 500 times to find it; `build` numbers sessions in start order.
        big_deep = _deep_id(args.sessions)
        small_deep = deep_cursor(server, SMALL_KEY, SMALL_SESSIONS // 2)
        requests: dict[str, tuple[str, str, dict[str, Any]]] = {}
        for who, key, deep in (("big", BIG_KEY, big_deep), ("small", SMALL_KEY, small_deep)):
            search = "/v1/sessions/search"
            requests |= {
                f"{who} search common": (key, search, {"q": COMMON, "limit": 5}),
                f"{who} search two": (key, search, {"q": f"{COMMON} {SECOND}", "limit": 5}),
                f"{who} search rare": (key, search, {"q": RARE, "limit": 5}),
                f"{who} list first": (key, "/v1/sessions", {"limit": 20}),
                f"{who} list deep": (key, "/v1/sessions", {"limit": 20, "after": deep}),
            }
        figures = measure(server, args.runs, requests)
    finally:
        server.close()
    print(
        f"one key with {args.sessions:,} sessions ({args.sessions * MESSAGES_PER_SESSION:,}"
        f" messages) vs one with {SMALL_SESSIONS}, real server over HTTP, n={args.runs}"
    )
    columns = f"{'p50':>9}{'p90':>8}{'cpu':>8}   "
    print(f"  {'':<16}{'big key':>25}   {'small key':>25}   ratio")
    print(f"  {'':<16}{columns}{columns}")
    for what in ("search common", "search two", "search rare", "list first", "list deep"):
        big, small = figures[f"big {what}"], figures[f"small {what}"]
        print(
            f"  {what:<16}{big.p50:9.1f}{big.p90:8.1f}{big.cpu_ms:8.1f}   "
            f"{small.p50:9.1f}{small.p90:8.1f}{small.cpu_ms:8.1f}   {big.p50 / small.p50:5.1f}x"
        )
    print("  (milliseconds: wall p50/p90 at the client, server CPU per request)")
    return 0


def _deep_id(sessions: int) -> str:
    """The big key's session half way down its list (newest first), 50,000 deep at 100k."""
    owners = _owners(sessions)
    big = [i for i, owner in enumerate(owners) if owner == fingerprint(BIG_KEY)]
    return f"s{big[len(big) - 1 - sessions // 2]:07d}"


if __name__ == "__main__":
    sys.exit(main())
