"""The store's sessions section: creating a session, reading its row, and its turn lease."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from functools import partial

from sqlalchemy import Connection, text

from app.db import tool_sets
from app.db.models import SessionRow
from app.db.store.records import NewMessage, message_values, session_from
from app.db.store.transactions import Transactions
from app.db.turn_sql import (
    GET_SESSION,
    INSERT_MESSAGE,
    INSERT_SESSION,
    RELEASE_LEASE,
    RENEW_LEASE,
    SESSION_DEFAULTS,
    TAKE_LEASE,
    session_row,
)


class Sessions(Transactions):
    """Sessions created whole, their rows read (the lease holder's from memory), their
    turn lease taken, renewed and released."""

    def create_session(
        self,
        *,
        session_id: str,
        owner: str,
        profile: str,
        system_prompt: str,
        end_user: str = "",
        tool_snapshot: str = "[]",
        client_tools: str = "[]",
        client_instructions: Sequence[str] = (),
        lease: str | None = None,
        lease_ttl_s: float = 0.0,
        messages: Sequence[NewMessage] = (),
        transcript: tuple[str, int] | None = None,
    ) -> SessionRow:
        """Create a session, optionally already leased and holding its first messages, in
        one transaction: a crash can never leave a half-made session behind. `transcript`:
        (head, length) of its transcript index, when the caller adds the keys itself."""
        now = time.time()
        values = {
            **SESSION_DEFAULTS,
            "id": session_id,
            "owner": owner,
            "end_user": end_user,
            "profile": profile,
            "system_prompt": system_prompt,
            "tool_snapshot": tool_snapshot,
            "client_tools": client_tools,
            "client_instructions": json.dumps(list(client_instructions)),
            "lease": lease,
            "lease_expires_at": now + lease_ttl_s if lease else None,
            "started_at": now,
            "updated_at": now,
        }
        if transcript is not None:
            values["transcript_head"], values["transcript_len"] = transcript
        self._forget_live(session_id)
        row = session_row(values)
        with self._write() as conn:
            INSERT_SESSION.run(
                conn, values | {"tool_snapshot": self._tool_set(conn, tool_snapshot)}
            )
            if lease:
                # Created leased in this unit: the unit's later writes need no fence, which
                # would only rewrite the `updated_at` just inserted (a statement per turn).
                self._fence_proved(session_id, lease, 1)
                self._rows.keep(row)
            if messages:
                rows = [message_values(m, session_id=session_id, turn_id=None) for m in messages]
                INSERT_MESSAGE.run_many(conn, rows)
            else:
                # Known to be empty: the appends that follow extend it as they commit, so
                # the session's first upstream call does not read back what it just wrote.
                self._after_commit(lambda: self._start_live(session_id))
        return row

    def set_tool_snapshot(self, *, session_id: str, lease: str, snapshot: str, reason: str) -> None:
        """Replace the tool snapshot and mark the next request as a deliberate cache break."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            conn = db.connection()
            conn.execute(
                text(
                    "UPDATE session SET tool_snapshot = :snap, pending_cache_break = :reason "
                    "WHERE id = :sid"
                ),
                {"snap": self._tool_set(conn, snapshot), "reason": reason, "sid": session_id},
            )
        self._rows.set(session_id, tool_snapshot=snapshot, pending_cache_break=reason)

    def _tool_set(self, conn: Connection, snapshot: str) -> str:
        """What a session row stores for `snapshot`, its set stored with the transaction."""
        stored, added = tool_sets.store_reference(conn, snapshot)
        if added:
            self._after_commit(partial(tool_sets.committed, self.engine, stored))
        return stored

    def get_session(self, *, session_id: str) -> SessionRow | None:
        with self._reader() as conn:
            found = GET_SESSION.run(conn, {"sid": session_id}).fetchone()
            if found is None:
                return None
            row = session_from(conn, found)
        return self._with_deferred(row)

    def leased_row(self, *, session_id: str) -> SessionRow | None:
        """The session's row as `get_session` would read it now, for the turn holding its
        lease: from memory while the store keeps it (app/db/leased_rows.py), else read.
        The test suite compares a kept row with a fresh read on every call."""
        kept = self._rows.get(session_id)
        if kept is None:
            return self.get_session(session_id=session_id)
        if self._verify_live:
            self._verify_row(kept)
        return kept

    def _verify_row(self, kept: SessionRow) -> None:
        fresh = self.get_session(session_id=kept.id)
        stored = fresh.model_dump() if fresh is not None else {}
        if fresh is not None and fresh.lease != kept.lease:
            return  # the lease was taken away: the turn's next fenced write finds out
        mine = kept.model_dump()
        if differ := sorted(k for k in mine if stored.get(k) != mine[k]):
            detail = {k: (mine[k], stored.get(k)) for k in differ}
            raise AssertionError(f"session {kept.id}: the kept row differs: {detail}")

    def _with_deferred(self, row: SessionRow) -> SessionRow:
        # Deferred writes not yet committed: the caller sees the row they will make.
        for apply in self._pending_rollups.get(row.id, ()):
            apply(row)
        return row

    def acquire_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        """Take the session's turn lease if it is free or expired. Inside a unit, taking it
        proves the fence for the unit's later writes (the transaction holds the write lock
        from this statement on, so nobody can take it in between)."""
        now = time.time()
        with self._write() as conn:
            params = {"lease": lease, "exp": now + ttl_s, "sid": session_id, "now": now}
            found = TAKE_LEASE.run(conn, params).fetchone()
            if found is None:
                return False
            self._fence_proved(session_id, lease, 1)
            self._rows.keep(session_from(conn, found))
            return True

    def renew_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        exp = time.time() + ttl_s
        with self._write() as conn:
            params = {"exp": exp, "sid": session_id, "lease": lease}
            if RENEW_LEASE.run(conn, params).rowcount != 1:
                return False
        self._rows.set(session_id, lease_expires_at=exp)
        return True

    def release_lease(self, *, session_id: str, lease: str) -> None:
        self._unfence(session_id, lease)
        self._rows.forget(session_id)
        with self._write() as conn:
            RELEASE_LEASE.run(conn, {"sid": session_id, "lease": lease})

    def clear_dead_leases(self, alive: Callable[[str], bool]) -> int:
        """At startup: free the leases whose holder process is gone (`alive(lease)` False)."""
        with self._tx() as db:
            held = db.execute(text("SELECT id, lease FROM session WHERE lease IS NOT NULL"))
            dead = [(sid, lease) for sid, lease in held if not alive(lease)]
            for sid, lease in dead:
                db.execute(
                    text(
                        "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                        "WHERE id = :sid AND lease = :lease"
                    ),
                    {"sid": sid, "lease": lease},
                )
        self._rows.clear()
        return len(dead)

    def clear_all_leases(self) -> int:
        """At startup: a lease left by a killed process would block its session until expiry."""
        with self._tx() as db:
            result = db.connection().execute(
                text(
                    "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                    "WHERE lease IS NOT NULL"
                )
            )
        self._rows.clear()
        return int(getattr(result, "rowcount", 0))
