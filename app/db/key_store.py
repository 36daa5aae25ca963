"""SQL for upstream key cool-downs: which of a profile's keys is resting, and until when.

Its own table, `upstream_key_state` (app/db/models.py), so a restart remembers that a key
was revoked or throttled instead of burning a request on it.
"""

from __future__ import annotations

from sqlalchemy import Engine, text


class KeyStateStore:
    """`KeyStates` for the key ring, in the server's database."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def cooling(self, profile: str) -> dict[str, float]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text("SELECT key_id, cooling_until FROM upstream_key_state WHERE profile = :p"),
                {"p": profile},
            )
            return {str(key): float(until) for key, until in rows}

    def cool(self, profile: str, key_id: str, *, until: float, reason: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO upstream_key_state (profile, key_id, cooling_until, reason, "
                    "failures) VALUES (:p, :k, :u, :r, 1) ON CONFLICT (profile, key_id) DO "
                    # Qualified: in an upsert PostgreSQL reads a bare `failures` as either
                    # the stored row's or `excluded`'s, and refuses it as ambiguous.
                    "UPDATE SET cooling_until = :u, reason = :r, "
                    "failures = upstream_key_state.failures + 1"
                ),
                {"p": profile, "k": key_id, "u": until, "r": reason},
            )
