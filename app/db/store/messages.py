"""The store's messages section: a session's log appended, rewritten and read, fenced on
the turn lease; its live part kept in memory between calls."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text
from sqlmodel import col, select

from app.db.models import MessageRow, SessionRow
from app.db.raw import Hot
from app.db.store.errors import LeaseLost
from app.db.store.records import (
    NewMessage,
    StoredMessage,
    message_row,
    message_values,
    stored,
    stored_values,
)
from app.db.store.transactions import LIVE_LOGS_KEPT, Deferred, Transactions
from app.db.turn_sql import ACTIVE_ROWS, INSERT_MESSAGE, INSERT_MESSAGE_ID, session_update
from app.observe.loop_passes import note as note_pass

BULK_ROWS = 16
"""Rows past which an append is one executemany (a client's imported history: 10,000
rows one INSERT ... RETURNING at a time took 100-140 ms of the writer, executemany 60-80)."""
_LAST_ID = Hot("SELECT COALESCE(MAX(id), 0) FROM message WHERE session_id = :sid")
_IDS_AFTER = Hot("SELECT id FROM message WHERE session_id = :sid AND id > :after ORDER BY id")


def _inserted_many(conn: Connection, session_id: str, values: list[dict[str, Any]]) -> list[int]:
    """Insert `values` with one executemany; their ids, in order. The lease is held (the
    caller fenced it in this transaction), so every row of the session past its newest id
    before the insert is one of these, numbered in the order inserted."""
    after = int(_LAST_ID.run(conn, {"sid": session_id}).fetchone()[0])
    INSERT_MESSAGE.run_many(conn, values)
    ids = [int(r[0]) for r in _IDS_AFTER.run(conn, {"sid": session_id, "after": after})]
    if len(ids) != len(values):
        raise AssertionError(f"appended {len(values)} rows, found {len(ids)}")
    return ids


class Messages(Transactions):
    """A session's log: appended and rewritten under the lease, read from the kept live
    log when there is one."""

    def append_messages(
        self,
        *,
        session_id: str,
        lease: str,
        turn_id: str | None,
        messages: Sequence[NewMessage],
        defer: bool = False,
    ) -> list[int]:
        """Append rows, fenced on the lease; returns their ids.

        `defer=True` (a final reply, which nothing acts on) lets the rows ride in the next
        transaction, normally the one that closes the turn; it returns no ids, and a lease
        lost by then is reported by `close_turn`.
        """
        values = [message_values(m, session_id=session_id, turn_id=turn_id) for m in messages]

        def write(conn: Connection) -> list[int]:
            self._fenced(conn, session_id=session_id, lease=lease)
            if len(values) >= BULK_ROWS:
                ids = _inserted_many(conn, session_id, values)
            else:
                # One row at a time: executemany hands back no RETURNING rows.
                ids = [int(INSERT_MESSAGE_ID.run(conn, v).fetchone()[0]) for v in values]
            added = [stored_values(i, v) for i, v in zip(ids, values, strict=True)]
            if added:
                self._after_commit(lambda: self._keep_live(session_id, added))
            return ids

        def deferred(conn: Connection) -> None:
            write(conn)

        if defer and self._defer(session_id, self._fence_checked(session_id, lease, deferred)):
            return []
        with self._write() as conn:
            return write(conn)

    def _fence_checked(self, session_id: str, lease: str, write: Deferred) -> Deferred:
        """A deferred fenced write: a lost lease drops it and is remembered for the turn,
        instead of rolling back the unfenced writes that share its transaction."""

        def checked(conn: Connection) -> None:
            try:
                write(conn)
            except LeaseLost:
                self._lost.add((session_id, lease))

        return checked

    def set_api_content(
        self, *, session_id: str, lease: str, message_id: int, api_content: str
    ) -> None:
        """Give a row a model-facing text different from its display text."""
        self._forget_live(session_id)
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            db.connection().execute(
                text("UPDATE message SET api_content = :api WHERE id = :mid AND session_id = :sid"),
                {"api": api_content, "mid": message_id, "sid": session_id},
            )

    def rewrite_live(
        self,
        *,
        session_id: str,
        lease: str,
        archive_ids: Sequence[int],
        insert: Sequence[NewMessage],
        session_updates: dict[str, Any],
    ) -> None:
        """Compaction and prune commit: archive rows, insert their replacements, update the
        session's counters, all in one transaction checked against the turn lease.

        Nothing is deleted: archived rows become `active=0, compacted=1` and stay
        searchable. The flags are not text columns, so the FTS triggers do no work.
        """
        self._forget_live(session_id)
        self._forget_row(session_id)
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            if archive_ids:
                db.connection().execute(
                    text(
                        "UPDATE message SET active = FALSE, compacted = TRUE "
                        "WHERE session_id = :sid AND id IN ("
                        + ",".join(str(int(i)) for i in archive_ids)
                        + ")"
                    ),
                    {"sid": session_id},
                )
            db.add_all(message_row(m, session_id=session_id, turn_id=None) for m in insert)
            session = db.get(SessionRow, session_id)
            assert session is not None
            for key, value in session_updates.items():
                setattr(session, key, value)
            db.add(session)

    def set_client_context(
        self,
        *,
        session_id: str,
        lease: str,
        values: dict[str, Any],
        cache_break: str | None,
    ) -> None:
        """Record a changed client tool set or instructions, and name the cache break the
        next request deliberately makes because of it."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            session = db.get(SessionRow, session_id)
            assert session is not None
            for key, value in values.items():
                setattr(session, key, value)
            if cache_break is not None:
                session.pending_cache_break = cache_break
            db.add(session)
        changed = values if cache_break is None else values | {"pending_cache_break": cache_break}
        self._rows.set(session_id, **changed)

    def update_session(self, *, session_id: str, lease: str, **values: Any) -> None:
        """Persist compressor counters, fenced like every other write: a turn that lost
        its lease must not reset the breaker of the turn that now owns the session.

        Deferred on the event loop: they ride in the turn's next transaction."""

        def apply(session: SessionRow) -> None:
            vars(session).update(values)  # a detached row (see `_issue`)

        columns = tuple(sorted(values))
        params = {f"v_{k}": v for k, v in values.items()} | {"sid": session_id}

        def write(conn: Connection) -> None:
            if self._holds_fence(session_id, lease):
                session_update(columns).run(conn, params)
                return
            # The update is the fence too: one statement where a fence and a write were two.
            fencing = session_update(columns, fenced=True)
            now = time.time()
            result = fencing.run(conn, params | {"now": now, "lease": lease})
            self._fence_proved(session_id, lease, result.rowcount, now=now)

        self._issue(session_id, write, apply)

    def get_message(self, *, session_id: str, message_id: int) -> StoredMessage | None:
        """One row of a session, live or archived (not retracted)."""
        self.flush()
        with self._session() as db:
            row = db.get(MessageRow, message_id)
            if row is None or row.session_id != session_id:
                return None
            if not row.active and not row.compacted:
                return None
            return stored(row)

    def active_messages(self, *, session_id: str) -> list[StoredMessage]:
        self.flush()
        with self._live_lock:
            kept = self._live.get(session_id)
            if kept is not None:
                self._live.move_to_end(session_id)
                kept = list(kept)
        if kept is not None:
            if self._verify_live and (fresh := self._load_active(session_id)) != kept:
                raise AssertionError(f"kept live log of {session_id} drifted: {kept} != {fresh}")
            return kept
        rows = self._load_active(session_id)
        note_pass("load", len(rows))
        if getattr(self._unit, "conn", None) is None:
            with self._live_lock:
                self._live[session_id] = list(rows)
                while len(self._live) > LIVE_LOGS_KEPT:
                    self._live.popitem(last=False)
        return rows

    def keeps_live(self, session_id: str) -> bool:
        """The session's live log is in memory: `active_messages` will not read it."""
        with self._live_lock:
            return session_id in self._live

    def load_live(self, *, session_id: str) -> None:
        """Read the live log into memory, for a worker thread (app/agent/context/row_passes.py).

        `active_messages` without its flush: the deferred queue is the loop's, so the
        caller flushes there first. Only the lease holder appends to a session, and it is
        waiting for this, so no commit of the session lands between the read and the keep.
        """
        rows = self._load_active(session_id)
        note_pass("load", len(rows))
        with self._live_lock:
            self._live[session_id] = rows
            while len(self._live) > LIVE_LOGS_KEPT:
                self._live.popitem(last=False)

    def _load_active(self, session_id: str) -> list[StoredMessage]:
        with self._reader() as conn:
            rows = ACTIVE_ROWS.run(conn, {"sid": session_id}).fetchall()
        return [
            StoredMessage(
                id=r[0],
                role=r[1],
                content=r[2],
                api_content=r[3],
                tool_calls=tuple(json.loads(r[4])) if r[4] else (),
                tool_call_id=r[5],
                tool_name=r[6],
                is_error=bool(r[7]),
                turn_id=r[8],
                kind=r[9],
                images=tuple(json.loads(r[10])) if r[10] else (),
            )
            for r in rows
        ]

    def debug_dump(self, *, session_id: str) -> list[dict[str, Any]]:
        """Every message row of a session, live or not, for tests and operators."""
        self.flush()
        with self._session() as db:
            rows = db.exec(
                select(MessageRow)
                .where(MessageRow.session_id == session_id)
                .order_by(col(MessageRow.id))
            ).all()
            return [r.model_dump() for r in rows]
