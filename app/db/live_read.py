"""A session's live log read fresh from the database, past the store's kept copy.

For checks that must not trust what is kept in memory (the verification of the kept
projection in app/agent/live_projection.py): reading through `active_messages` would
compare the kept state with itself.
"""

from __future__ import annotations

from app.db.store import Store, StoredMessage


def fresh_active_rows(store: Store, *, session_id: str) -> list[StoredMessage]:
    return store._load_active(session_id)
