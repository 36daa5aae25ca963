"""The breaker: no automatic compaction for a while after compactions that did not help.

A transcript whose floor alone exceeds the threshold would otherwise compact again on
every turn, forever; its counters live on the session row, so a restart cannot disarm it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.db.models import SessionRow
from app.db.store import Store

log = logging.getLogger(__name__)

BLOCK_WINDOW_S = 300.0


@dataclass
class Breaker:
    """Blocks automatic compaction after 2 ineffective verdicts or 2 fallback summaries.

    The counters live on the session row; the deadline is armed on the first blocked
    evaluation, on this process's monotonic clock. A fresh process that loads a tripped
    counter therefore starts a full window blocked instead of probing at once: a restart
    cannot disarm the guard.
    """

    clock: Callable[[], float] = time.monotonic
    _deadlines: dict[str, float] = field(default_factory=dict)

    def allows(self, store: Store, session: SessionRow, *, lease: str) -> bool:
        tripped = session.compaction_strikes >= 2 or session.fallback_streak >= 2
        if not tripped:
            self._deadlines.pop(session.id, None)
            return True
        deadline = self._deadlines.get(session.id)
        now = self.clock()
        if deadline is None:
            self._deadlines[session.id] = now + BLOCK_WINDOW_S
            log.warning(
                "session %s: automatic compaction blocked (%d ineffective, %d fallback)",
                session.id,
                session.compaction_strikes,
                session.fallback_streak,
            )
            return False
        if now < deadline:
            return False
        # Probation: one attempt. If it fails too, the next verdict re-trips at once.
        self._deadlines.pop(session.id, None)
        strikes, streak = min(session.compaction_strikes, 1), min(session.fallback_streak, 1)
        store.update_session(
            session_id=session.id, lease=lease, compaction_strikes=strikes, fallback_streak=streak
        )
        session.compaction_strikes, session.fallback_streak = strikes, streak
        log.info("session %s: compaction probation attempt", session.id)
        return True
