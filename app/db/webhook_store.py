"""The webhook outbox's SQL: enqueue an event inside the unit that records its fact, claim
a due one (a compare-and-set, so two deliverers never send one attempt twice), record each
attempt with the delivery's next state in one transaction.

Portable SQL (SQLite and PostgreSQL alike): `UPDATE ... RETURNING` with the guard in the
outer WHERE, so PostgreSQL re-checks it against a concurrent update.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from app.db.store import Store
from app.db.webhook_models import WebhookAttemptRow, WebhookDeliveryRow


@dataclass(frozen=True, slots=True)
class Claimed:
    delivery_id: str
    attempt: int
    """This attempt's number, from 1."""
    body: str
    give_up_at: float
    owner: str
    """The key whose target receives it."""


def enqueue(store: Store, row: WebhookDeliveryRow) -> None:
    """A new event, in the caller's unit (the fact it announces commits with it)."""
    with store.session() as db:
        db.add(row)
        db.commit()


def release_claims(store: Store) -> int:
    """At startup: a claim of the previous process (dead mid-attempt) is nobody's now; its
    event goes again, with the same id."""
    with store.begin() as conn:
        result = conn.execute(
            text(
                "UPDATE webhook_delivery SET claimed_by = NULL, claim_until = NULL "
                "WHERE state = 'pending' AND claimed_by IS NOT NULL"
            )
        )
        return int(result.rowcount)


def due(store: Store, *, now: float, limit: int = 50) -> list[str]:
    """Pending events whose next attempt is due and that no live claim holds."""
    with store.reader() as conn:
        rows = conn.execute(
            text(
                "SELECT id FROM webhook_delivery WHERE state = 'pending' "
                "AND next_attempt_at <= :now AND (claim_until IS NULL OR claim_until < :now) "
                "ORDER BY next_attempt_at LIMIT :limit"
            ),
            {"now": now, "limit": limit},
        ).all()
    return [str(r[0]) for r in rows]


def next_due_at(store: Store) -> float | None:
    """When the earliest pending event is due (None: nothing pending)."""
    with store.reader() as conn:
        found = conn.execute(
            text("SELECT MIN(next_attempt_at) FROM webhook_delivery WHERE state = 'pending'")
        ).scalar()
    return None if found is None else float(found)


def claim(store: Store, *, delivery_id: str, me: str, now: float, hold_s: float) -> Claimed | None:
    """Take one attempt at the event, or None when another deliverer holds it or it is no
    longer pending."""
    with store.begin() as conn:
        found = conn.execute(
            text(
                "UPDATE webhook_delivery SET claimed_by = :me, claim_until = :until, "
                "attempts = attempts + 1 WHERE id = :id AND state = 'pending' "
                "AND (claim_until IS NULL OR claim_until < :now) "
                "RETURNING attempts, body, give_up_at, owner"
            ),
            {"me": me, "until": now + hold_s, "id": delivery_id, "now": now},
        ).first()
    if found is None:
        return None
    return Claimed(delivery_id, int(found[0]), str(found[1]), float(found[2]), str(found[3]))


def record_attempt(
    store: Store, attempt: WebhookAttemptRow, *, me: str, state: str, next_attempt_at: float
) -> None:
    """The attempt's row and the event's next state, while this deliverer holds its claim."""
    with store.session() as db:
        db.add(attempt)
        db.connection().execute(
            text(
                "UPDATE webhook_delivery SET state = :state, next_attempt_at = :next, "
                "claimed_by = NULL, claim_until = NULL WHERE id = :id AND claimed_by = :me"
            ),
            {"state": state, "next": next_attempt_at, "id": attempt.delivery_id, "me": me},
        )
        db.commit()
