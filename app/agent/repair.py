"""Close tool calls a crash or a cancellation left without a result, in the durable log."""

from __future__ import annotations

from app.agent.live_projection import projections_for
from app.db.store import NewMessage, Store


def close_unanswered_calls(
    store: Store,
    *,
    session_id: str,
    lease: str,
    turn_id: str | None,
    result: str,
    keep: set[str | None] | None = None,
) -> int:
    """Append a synthetic error result for each open call; returns how many were closed.

    Runs before new user messages are appended, so the result lands directly after its
    call: appended later, it would sit behind the user turn and break the transcript.
    """
    # `keep`: calls the request being appended answers itself (a client tool's result).
    live = store.active_messages(session_id=session_id)
    pending = [
        (cid, name)
        for cid, name in projections_for(store).unanswered(session_id, live)
        if not keep or cid not in keep
    ]
    if pending:
        store.append_messages(
            session_id=session_id,
            lease=lease,
            turn_id=turn_id,
            messages=[
                NewMessage(
                    role="tool", content=result, tool_call_id=cid, tool_name=name, is_error=True
                )
                for cid, name in pending
            ],
        )
    return len(pending)
