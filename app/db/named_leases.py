"""Named leases: "one process at a time does X" across processes sharing a database (the
scheduler's `scheduler` lease). One upsert takes or renews a lease, portable to SQLite and
PostgreSQL: it wins when the row is new, already ours, or expired.
"""

from __future__ import annotations

from sqlalchemy import text

from app.db.store import Store


def take(store: Store, name: str, *, holder: str, now: float, ttl_s: float) -> bool:
    """Take or renew lease `name` for `holder` until now + ttl_s; False when another live
    holder has it."""
    with store.begin() as conn:
        won = conn.execute(
            text(
                "INSERT INTO courier_lease (name, holder, expires_at) "
                "VALUES (:name, :holder, :until) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                "expires_at = excluded.expires_at "
                "WHERE courier_lease.holder = excluded.holder OR courier_lease.expires_at < :now "
                "RETURNING holder"
            ),
            {"name": name, "holder": holder, "until": now + ttl_s, "now": now},
        ).scalar()
    return won == holder


def release(store: Store, name: str, *, holder: str) -> None:
    with store.begin() as conn:
        conn.execute(
            text("DELETE FROM courier_lease WHERE name = :name AND holder = :holder"),
            {"name": name, "holder": holder},
        )
