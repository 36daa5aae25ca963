"""Stateless continuity: the cost of finding a resent conversation, by how many are stored.

Fills a real SQLite store with N sessions of 20 indexed visible messages each, then times
`find_continuations` for a 20-message history that matches one of them, at N = 1,000 and
N = 100,000 (the baseline is the small store, measured in the same run). The lookup is
one indexed IN query over the request's own rolling hashes, so the ratio should stay
near 1. Prints figures only; nothing asserts.

    .venv/bin/python benchmarks/continuity_lookup.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from app.agent.opening.continuity import chain, scope_seed
from app.agent.turn_request import VisibleMessage
from app.db.chat_models import TranscriptKeyRow
from app.db.chat_store import find_continuations
from app.db.models import SessionRow
from app.db.store import Store

MESSAGES = 20
LOOKUPS = 200


def _fill(store: Store, sessions: int) -> list[str]:
    """N sessions, each with its own index chain; returns the last session's hashes."""
    hashes: list[str] = []
    session_rows: list[dict[str, object]] = []
    key_rows: list[dict[str, object]] = []
    for n in range(sessions):
        sid = f"sess_{n}"
        session_rows.append(
            SessionRow(id=sid, owner="owner", profile="courier", system_prompt="").model_dump()
        )
        seed = scope_seed(owner="owner", profile="courier", end_user=f"user{n}")
        visible = [
            VisibleMessage("user" if i % 2 == 0 else "assistant", f"message {i} of {n}")
            for i in range(MESSAGES)
        ]
        hashes = chain(seed, visible)
        key_rows += [
            {
                "prefix_hash": h,
                "session_id": sid,
                "position": i + 1,
                "last_row_id": i + 1,
                "compactions": 0,
                "created_at": 0.0,
            }
            for i, h in enumerate(hashes)
        ]
    with store.engine.begin() as conn:
        conn.execute(SessionRow.__table__.insert(), session_rows)  # type: ignore[attr-defined]
        conn.execute(TranscriptKeyRow.__table__.insert(), key_rows)  # type: ignore[attr-defined]
    return hashes


def _measure(sessions: int, root: Path) -> float:
    store = Store.open(root / f"bench-{sessions}.db")
    try:
        hashes = _fill(store, sessions)
        times = []
        for _ in range(LOOKUPS):
            started = time.perf_counter()
            found = find_continuations(store, hashes=hashes)[0]
            times.append(time.perf_counter() - started)
            assert found is not None and found.position == MESSAGES
        return statistics.median(times) * 1e6
    finally:
        store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        small = _measure(1_000, Path(tmp))
        large = _measure(100_000, Path(tmp))
    print(f"find_continuations, 20-message history, median of {LOOKUPS}:")
    print(f"  1,000 sessions (baseline): {small:8.1f} us")
    print(f"  100,000 sessions:          {large:8.1f} us   ratio {large / small:.2f}")


if __name__ == "__main__":
    main()
