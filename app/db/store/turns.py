"""The store's turns section: a turn's row from its start to its closing transaction."""

from __future__ import annotations

import time

from sqlalchemy import Connection

from app.db.models import TurnRow
from app.db.store.transactions import Transactions
from app.db.turn_sql import (
    FINISH_TURN,
    INSERT_TURN,
    RELEASE_LEASE,
    RELEASE_MOVING_HEAD,
    TURN_DEFAULTS,
)


class Turns(Transactions):
    """A turn's row: started under the lease, finished, closed with the lease's release."""

    def start_turn(self, *, session_id: str, lease: str, turn_id: str) -> None:
        with self._write() as conn:
            self._fenced(conn, session_id=session_id, lease=lease)
            INSERT_TURN.run(
                conn,
                {
                    **TURN_DEFAULTS,
                    "id": turn_id,
                    "session_id": session_id,
                    "started_at": time.time(),
                },
            )

    def finish_turn(
        self, *, turn_id: str, exit_reason: str, iterations: int, error: str | None = None
    ) -> None:
        # Not fenced: recording why a turn ended must succeed even after its lease is gone.
        with self._write() as conn:
            self._finish(conn, turn_id, exit_reason, iterations, error)

    @staticmethod
    def _finish(
        conn: Connection, turn_id: str, exit_reason: str, iterations: int, error: str | None
    ) -> None:
        FINISH_TURN.run(
            conn,
            {
                "now": time.time(),
                "reason": exit_reason,
                "iterations": iterations,
                "error": error,
                "tid": turn_id,
            },
        )

    def close_turn(
        self,
        *,
        session_id: str,
        lease: str,
        turn_id: str,
        exit_reason: str,
        iterations: int,
        error: str | None = None,
        transcript: tuple[str, int] | None = None,
    ) -> None:
        """The turn's closing transaction: whatever it deferred (reply, usage, counters),
        its finish record and the lease's release, in one commit. `transcript`: the
        (head, length) the session's transcript index moves to, in the release's statement.

        Ask `take_lost` first (in the same unit) whether a deferred reply was refused
        because the lease had gone, so the turn reports that instead of success.
        """
        self._unfence(session_id, lease)
        self._rows.forget(session_id)
        with self._write() as conn:
            self._finish(conn, turn_id, exit_reason, iterations, error)
            params = {"sid": session_id, "lease": lease}
            if transcript is None:
                RELEASE_LEASE.run(conn, params)
            else:
                head, length = transcript
                RELEASE_MOVING_HEAD.run(conn, params | {"h": head, "n": length})

    def take_lost(self, *, session_id: str, lease: str) -> bool:
        """Whether a deferred fenced write of this lease was refused (its lease had gone);
        flushes what is deferred first, and forgets the answer once given."""
        self.flush()
        if (session_id, lease) in self._lost:
            self._lost.discard((session_id, lease))
            return True
        return False

    def get_turn(self, *, turn_id: str) -> TurnRow | None:
        self.flush()
        with self._session(expire_on_commit=False) as db:
            return db.get(TurnRow, turn_id)
