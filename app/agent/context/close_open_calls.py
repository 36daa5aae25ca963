"""Close tool calls a crash or a cancellation left without a result, in the durable log."""

from __future__ import annotations

from app.agent.context.live_projection import projections_for
from app.db.store import NewMessage, Store


def close_unanswered_calls(
    store: Store,
    *,
    session_id: str,
    lease: str,
    turn_id: str | None,
    result: str,
    keep: set[str | None] | None = None,
    unanswered: list[tuple[str, str]] | None = None,
) -> int:
    """Append a synthetic error result for each open call; returns how many were closed.

    Runs before new user messages are appended, so the result lands directly after its
    call: appended later, it would sit behind the user turn and break the transcript.
    """
    # `keep`: calls the request being appended answers itself (a client tool's result).
    # `unanswered`: the open calls, when the caller has just read them (reading them again
    # means a second pass over a session's whole log on its first turn after a restart).
    if unanswered is None:
        unanswered = open_calls(store, session_id)
    pending = [(cid, name) for cid, name in unanswered if not keep or cid not in keep]
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


def open_calls(store: Store, session_id: str) -> list[tuple[str, str]]:
    """(call id, tool name) of every call in the live log without a result yet."""
    live = store.active_messages(session_id=session_id)
    return projections_for(store).unanswered(session_id, live)
