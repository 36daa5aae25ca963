"""SQL for durable idempotency: which request an `Idempotency-Key` named, the turn it
started, and once finished the events to replay it from, 24 hours, across restarts.

Its own table, `idempotency_record` (app/db/models.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from app.db.store import Store

RETENTION_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    digest: str
    turn_id: str
    session_id: str
    completion_id: str
    created: int
    events: list[dict[str, Any]] | None
    """None while the turn runs (or if its process died before it finished)."""


class IdempotencyStore:
    """Writes join the store's current unit: a keyed turn's records land in its opening and
    closing transactions instead of two more commits of their own on the event loop."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.engine = store.engine

    def started(self, *, owner: str, key: str, digest: str, turn_id: str, session_id: str) -> None:
        with self.store.begin() as conn:
            conn.execute(
                text("DELETE FROM idempotency_record WHERE created_at < :old"),
                {"old": time.time() - RETENTION_S},
            )
            conn.execute(
                text(
                    # A replace, as SQLite's INSERT OR REPLACE did (PostgreSQL has no such
                    # form): a stale record of the key is overwritten whole, events too.
                    "INSERT INTO idempotency_record (owner, key, digest, turn_id, "
                    "session_id, created_at) VALUES (:o, :k, :d, :t, :s, :now) "
                    "ON CONFLICT (owner, key) DO UPDATE SET digest = excluded.digest, "
                    "turn_id = excluded.turn_id, session_id = excluded.session_id, "
                    "created_at = excluded.created_at, completion_id = '', created = 0, "
                    "events = NULL"
                ),
                {
                    "o": owner,
                    "k": key,
                    "d": digest,
                    "t": turn_id,
                    "s": session_id,
                    "now": time.time(),
                },
            )

    def finished(
        self,
        *,
        owner: str,
        key: str,
        completion_id: str,
        created: int,
        events: list[dict[str, Any]],
    ) -> None:
        with self.store.begin() as conn:
            conn.execute(
                text(
                    "UPDATE idempotency_record SET completion_id = :c, created = :cr, "
                    "events = :e WHERE owner = :o AND key = :k"
                ),
                {"c": completion_id, "cr": created, "e": json.dumps(events), "o": owner, "k": key},
            )

    def find(self, *, owner: str, key: str) -> IdempotencyRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT digest, turn_id, session_id, completion_id, created, events "
                    "FROM idempotency_record WHERE owner = :o AND key = :k AND created_at >= :old"
                ),
                {"o": owner, "k": key, "old": time.time() - RETENTION_S},
            ).first()
        if row is None:
            return None
        events = json.loads(row[5]) if row[5] is not None else None
        return IdempotencyRecord(row[0], row[1], row[2], row[3], int(row[4]), events)
