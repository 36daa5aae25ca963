"""A page of the sessions list: 50 sessions with 100 ledger calls each, in-process.

Baseline: every call re-priced on every page (what a naive cost column does). Courier:
the no-cache counterfactual of a call is priced once per process and reused, so a warm
page costs the queries only. Prints both figures and the ratio; no assertions.

    .venv/bin/python benchmarks/sessions_list.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.api.sessions.cost import UncachedCosts, cost_report, profile_pricer
from app.config import Profile
from app.db import session_query as q
from app.db.store import ApiCallRecord, NewMessage, Store

SESSIONS, CALLS, ROUNDS = 50, 100, 5


def fill(store: Store) -> None:
    for s in range(SESSIONS):
        sid = f"sess_bench_{s:03d}"
        store.create_session(
            session_id=sid,
            owner="key_bench",
            profile="courier",
            system_prompt="x",
            messages=[NewMessage(role="user", content=f"question {s}")],
        )
        for c in range(CALLS):
            store.record_api_call(
                session_id=sid,
                owner="key_bench",
                turn_id=f"turn_{s}_{c // 2}",
                call=ApiCallRecord(
                    profile="courier",
                    upstream_model="claude-sonnet-4-5",
                    input_tokens=200 + c,
                    output_tokens=80,
                    cache_read_tokens=4000 + 40 * c,
                    cache_write_tokens=300,
                    reasoning_tokens=0,
                    cost_usd=Decimal("0.003"),
                    cost_status="estimated",
                    cost_source="bench",
                    latency_ms=1.0,
                    ttft_ms=None,
                    outcome="ok",
                ),
            )


def page(store: Store, cache: UncachedCosts) -> float:
    pricer = profile_pricer({"courier": Profile(provider="anthropic", model="claude-sonnet-4-5")})
    started = time.perf_counter()
    rows, _ = q.list_sessions(store, owner="key_bench", limit=SESSIONS)
    for row in rows:
        cost_report(row.calls, pricer, buckets=False, uncached_costs=cache)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp) / "bench.db")
        fill(store)
        naive = [page(store, UncachedCosts(limit=0)) for _ in range(ROUNDS)]
        shared = UncachedCosts()
        cold = page(store, shared)
        warm = [page(store, shared) for _ in range(ROUNDS)]
        store.close()
    base, ours = statistics.median(naive), statistics.median(warm)
    print(f"sessions page ({SESSIONS} sessions x {CALLS} calls)")
    print(f"  re-price every call (baseline): median {base:.1f} ms")
    print(f"  counterfactual cached, cold:    {cold:.1f} ms")
    print(f"  counterfactual cached, warm:    median {ours:.1f} ms  ({base / ours:.1f}x faster)")


if __name__ == "__main__":
    main()
