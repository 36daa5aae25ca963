"""Startup repair of the turns a dead process left running (kill -9, a power cut, a
drain that ran out of time before the process was killed).

Without it such a turn has no exit reason forever, so the turns route shows it running,
and its open tool calls wait for the session's next request to be closed. Here each gets
the exit reason `interrupted` and, when it is its session's newest turn, a synthetic result
for every call it left open, so the stored transcript is valid before anyone asks.
"""

from __future__ import annotations

import logging

from app.agent.context.close_open_calls import close_unanswered_calls
from app.agent.context.projection import INTERRUPTED_RESULT
from app.agent.turns.manager import new_lease_token
from app.db.store import Store
from app.db.turn_store import unfinished_turns

log = logging.getLogger(__name__)

REPAIR_LEASE_S = 60.0


def repair_interrupted_turns(store: Store) -> int:
    """Mark every unfinished turn `interrupted` and close its open calls; returns how many.

    Runs after the leases of the dead process are cleared. Only the newest turn of a
    session may still have open calls of its own: an older one was followed by a request
    that already closed them (or answered them, for a client's tools).
    """
    repaired = 0
    for turn_id, session_id, newest in unfinished_turns(store.engine):
        if newest:
            lease = new_lease_token()
            if store.acquire_lease(session_id=session_id, lease=lease, ttl_s=REPAIR_LEASE_S):
                try:
                    close_unanswered_calls(
                        store,
                        session_id=session_id,
                        lease=lease,
                        turn_id=turn_id,
                        result=INTERRUPTED_RESULT,
                    )
                finally:
                    store.release_lease(session_id=session_id, lease=lease)
        store.finish_turn(turn_id=turn_id, exit_reason="interrupted", iterations=0)
        repaired += 1
    if repaired:
        log.warning("marked %d turn(s) left running by a previous process as interrupted", repaired)
    return repaired
