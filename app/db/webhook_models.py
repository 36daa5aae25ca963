"""Tables of the webhook outbox: one row per event to deliver, one per delivery attempt.

An event is inserted in the same transaction as the fact it announces (a background
response's final record), so there is never an event without its fact nor a fact without
its event; the dispatcher (`app/webhooks/dispatcher.py`) delivers it at least once, across
restarts, with the same id every time. No URL and no secret are stored: both come from the
settings at each attempt (the attempt row records the URL used).
"""

from __future__ import annotations

import time

from sqlalchemy import Index
from sqlmodel import Field, SQLModel


def _now() -> float:
    return time.time()


class WebhookDeliveryRow(SQLModel, table=True):
    __tablename__ = "webhook_delivery"
    __table_args__ = (Index("ix_webhook_delivery_due", "state", "next_attempt_at"),)

    id: str = Field(primary_key=True)
    """The event id (`evt_...`): the `webhook-id` of every attempt, so receivers dedupe."""
    owner: str
    event_type: str
    body: str
    """The exact bytes signed and sent."""
    state: str = "pending"
    """`pending`, `delivered` or `failed` (retried for `COURIER_WEBHOOK_RETRY_FOR_S`)."""
    attempts: int = 0
    next_attempt_at: float = Field(default_factory=_now)
    claimed_by: str | None = None
    claim_until: float | None = None
    created_at: float = Field(default_factory=_now)
    give_up_at: float = 0.0


class WebhookAttemptRow(SQLModel, table=True):
    __tablename__ = "webhook_attempt"

    delivery_id: str = Field(primary_key=True)
    attempt: int = Field(primary_key=True)
    at: float = Field(default_factory=_now)
    url: str = ""
    status: int | None = None
    """The receiver's HTTP status; None when no answer came (see `error`)."""
    error: str | None = None
    """`timeout`, `connect_error`, `egress_refused: ...`, or the status for a non-2xx."""
    duration_ms: int = 0
