"""SQL for upstream key cool-downs: which of a profile's keys is resting, and until when.

Its own table, created here on first use (additive: older data directories gain it), so a
restart remembers that a key was revoked or throttled instead of burning a request on it.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

_DDL = """CREATE TABLE IF NOT EXISTS upstream_key_state (
    profile TEXT NOT NULL,
    key_id TEXT NOT NULL,
    cooling_until REAL NOT NULL,
    reason TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (profile, key_id)
)"""


class KeyStateStore:
    """`KeyStates` for the key ring, on the server's SQLite file."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        with engine.begin() as conn:
            conn.execute(text(_DDL))

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
                    "UPDATE SET cooling_until = :u, reason = :r, failures = failures + 1"
                ),
                {"p": profile, "k": key_id, "u": until, "r": reason},
            )
