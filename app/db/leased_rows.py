"""The session rows this process's turns hold the lease of, kept in memory.

A turn read its session's row back before every upstream call but a new session's first (a
pool checkout, a SELECT and a row built on the event loop, about 0.1 ms), and every call's
roll-up read the row's cost in the writer's unit before adding to it. Under the lease only
its holder writes the row, so the store keeps the row from the lease's taking to its
release and applies each of the holder's writes to it as the write is issued: a deferred
write at once, so a read sees what the queue will commit, as `get_session` does.

Whatever else rewrites the row (a compaction, a retraction) drops it, and so does any
rollback; the next read goes to the database. A row is handed out as a copy: a caller that
changes the row it got would otherwise change what the next call reads. With
COURIER_VERIFY_LIVE_LOG=1 (the test suite) every read is compared with a fresh one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.db.models import SessionRow
from app.db.turn_sql import SESSION_COLUMNS, session_row


def copy_row(row: SessionRow) -> SessionRow:
    values = row.__dict__
    return session_row({c: values[c] for c in SESSION_COLUMNS})


class LeasedRows:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._rows: dict[str, SessionRow] = {}
        self._lock = threading.Lock()
        """The writer thread applies a unit's writes while the loop reads other rows."""

    def keep(self, row: SessionRow) -> None:
        kept = copy_row(row)
        with self._lock:
            self._rows.pop(row.id, None)
            self._rows[row.id] = kept
            # A lease never released (a crashed path) must not pin rows forever: past the
            # bound the oldest goes, and its holder reads the database again.
            while len(self._rows) > self._limit:
                del self._rows[next(iter(self._rows))]

    def get(self, session_id: str) -> SessionRow | None:
        with self._lock:
            kept = self._rows.get(session_id)
            return copy_row(kept) if kept is not None else None

    def apply(self, session_id: str, change: Callable[[SessionRow], None]) -> None:
        with self._lock:
            kept = self._rows.get(session_id)
            if kept is not None:
                change(kept)

    def set(self, session_id: str, **values: Any) -> None:
        with self._lock:
            kept = self._rows.get(session_id)
            if kept is not None:
                kept.__dict__.update(values)

    def cost(self, session_id: str) -> str | None:
        """The kept row's rolled-up cost: what a roll-up expects the stored one to be."""
        with self._lock:
            kept = self._rows.get(session_id)
            return kept.cost_usd if kept is not None else None

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._rows.pop(session_id, None)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._rows
