"""The calibrated trigger's anchor, and a compaction's verdict, taken from a billed prompt.

Our rough estimate is re-anchored to the provider's billed prompt tokens after every
response that fit, and compaction fires on the projection
`billed_at_anchor + (rough_now - rough_at_anchor)` (`sizes.projected`), not on the raw
guess, which runs 2-3x high on CJK text and would compact at a third of the real window.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from app.db.models import SessionRow
from app.db.store import Store
from app.providers.usage import Usage

log = logging.getLogger(__name__)


def observe_response(
    store: Store,
    session: SessionRow,
    *,
    rough_at_call: int,
    usage: Usage | None,
    threshold: int,
    lease: str,
) -> None:
    """Re-anchor on a response whose prompt fit, and give a pending compaction its verdict.

    The verdict lives here, where the billed count is visible, and not in the preflight
    check: the rough preflight estimate can dip below the line on its own and would clear
    strikes and reopen the loop every turn. A response without usage consumes the latch,
    so a reading three turns later is never charged to a compaction it has nothing to do
    with.
    """
    updates: dict[str, Any] = {}
    if usage is not None and usage.prompt_tokens > 0:
        updates |= {"anchor_rough": rough_at_call, "anchor_billed": usage.prompt_tokens}
    if session.verdict_pending:
        updates["verdict_pending"] = False
        if usage is not None and usage.prompt_tokens > 0:
            ineffective = usage.prompt_tokens >= threshold
            updates["compaction_strikes"] = session.compaction_strikes + 1 if ineffective else 0
            if ineffective:
                log.warning(
                    "session %s: compaction left the prompt at %d tokens (threshold %d)",
                    session.id,
                    usage.prompt_tokens,
                    threshold,
                )
    updates["last_call_at"] = time.time()
    store.update_session(session_id=session.id, lease=lease, **updates)
