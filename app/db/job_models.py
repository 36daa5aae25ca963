"""Tables of scheduled jobs: the job, each of its runs, and the named leases a scheduler
holds (generic: any "one process does this" role can take one by name).

`UNIQUE(job_id, scheduled_for)` is what makes a tick fire once: the claim advancing
`next_run_at` is a compare-and-set in the run's own insert transaction, and a second
insert of the same tick fails. Manual runs have `scheduled_for` NULL, which both SQLite
and PostgreSQL let repeat under UNIQUE.
"""

from __future__ import annotations

import time

from sqlalchemy import BigInteger, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel


def _now() -> float:
    return time.time()


class JobRow(SQLModel, table=True):
    __tablename__ = "job"
    __table_args__ = (Index("ix_job_next_run_at", "next_run_at"),)

    id: str = Field(primary_key=True)
    owner: str = Field(index=True)
    end_user: str = ""
    name: str
    schedule: str
    input: str
    """The Responses `input` as JSON."""
    instructions: str | None = None
    profile: str
    max_cost_usd: str
    """A Decimal as text: a float would round the cap."""
    session_mode: str = "new"
    session_id: str | None = None
    paused: bool = False
    next_run_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """The next tick (epoch seconds), NULL when paused or deleted."""
    running_run_id: str | None = None
    consecutive_failures: int = 0
    created_at: float = Field(default_factory=_now)
    updated_at: float = Field(default_factory=_now)
    deleted_at: float | None = None


class JobRunRow(SQLModel, table=True):
    __tablename__ = "job_run"
    __table_args__ = (
        UniqueConstraint("job_id", "scheduled_for", name="uq_job_run_tick"),
        Index("ix_job_run_job", "job_id", "id"),
    )

    id: str = Field(primary_key=True)
    job_id: str
    owner: str
    trigger: str
    """`schedule` or `manual`."""
    scheduled_for: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    missed: int = 0
    """Ticks after `scheduled_for` that passed while nobody ran them (they run as this one)."""
    status: str = "queued"
    exit_reason: str | None = None
    error: str | None = None
    response_id: str | None = None
    session_id: str | None = None
    cost_usd: str | None = None
    cost_status: str | None = None
    upstream_calls: int = 0
    launcher: str = ""
    created_at: float = Field(default_factory=_now)
    started_at: float | None = None
    finished_at: float | None = None


class NamedLeaseRow(SQLModel, table=True):
    __tablename__ = "courier_lease"

    name: str = Field(primary_key=True)
    holder: str
    expires_at: float
