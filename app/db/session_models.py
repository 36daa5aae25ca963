"""Tables for the sessions surface: session retractions, stored Responses API objects and
the stream events of background responses.

Kept apart from `models.py` so the store's own tables can change without touching these,
and so an older data directory gains them by `create_all` without any migration.
"""

from __future__ import annotations

import time

from sqlmodel import Field, SQLModel

from app.db.models import BIG


def _now() -> float:
    return time.time()


class SessionRetractionRow(SQLModel, table=True):
    __tablename__ = "session_retraction"

    session_id: str = Field(primary_key=True, foreign_key="session.id")
    retracted_at: float = Field(default_factory=_now)
    purged: bool = False
    """The operator purged the transcript; only the usage ledger (and this row) remain."""


class ResponseRow(SQLModel, table=True):
    __tablename__ = "response_record"

    id: str = Field(primary_key=True)
    session_id: str = Field(foreign_key="session.id", index=True)
    owner: str = Field(index=True)
    previous_response_id: str | None = None
    first_message_id: int = Field(default=0, sa_type=BIG)
    """Rows of the session with ids in [first, last] were written by this response."""
    last_message_id: int = Field(default=0, sa_type=BIG)
    body: str = "{}"
    """The Response object as returned (JSON), so a GET answers with the same bytes."""
    input_items: str = "[]"
    """The request's input items as normalised JSON, for `/input_items`."""
    retracted: bool = False
    created_at: float = Field(default_factory=_now, index=True)
    background: bool = False
    """Created with `background: true`: polled, cancelled and its stream resumed by id."""
    status: str = ""
    """A background response's status as last stored (`queued` .. a terminal one); the
    other rows leave it empty, their body says."""
    turn_id: str | None = None
    events_through: int = -1
    """The last stream event stored in `response_event_chunk` (-1: none yet)."""


class ResponseEventChunk(SQLModel, table=True):
    """A background response's stream events, one row per flush (not per delta): a
    2,000-delta answer streamed over 40 s is about 40 rows, replayable after a restart."""

    __tablename__ = "response_event_chunk"

    # No foreign key: a purge deletes the chunks and their response in one transaction,
    # in either order, and a key would make every flush check the response row.
    response_id: str = Field(primary_key=True)
    first_seq: int = Field(primary_key=True)
    last_seq: int
    events: str
    """A JSON array of the rendered events, sequence numbers `first_seq..last_seq`."""


class HealthProbeRow(SQLModel, table=True):
    """One row the readiness probe rewrites, proving the database accepts commits."""

    __tablename__ = "health_probe"

    id: int = Field(primary_key=True)
    at: float = 0.0
