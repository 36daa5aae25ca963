"""The jobs' SQL: store a job, find the due ones, and fire a tick exactly once.

`fire` is one transaction whose first statement is the compare-and-set on `next_run_at`
(a read first would let SQLite upgrade a stale snapshot), followed by the run's insert;
`UNIQUE(job_id, scheduled_for)` backs it. Two schedulers racing for one tick: one CAS
matches, the other's matches no row and it inserts nothing. This holds with or without
the scheduler lease, which only saves the losers' wasted work.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import text
from sqlmodel import select

from app.db.job_models import JobRow, JobRunRow
from app.db.store import Store


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


@dataclass(frozen=True, slots=True)
class Due:
    job_id: str
    owner: str
    due: int
    """The tick being fired (the job's `next_run_at`)."""
    busy: bool
    """A run of the job is still in flight: this tick is recorded `skipped`."""


def add(store: Store, job: JobRow) -> None:
    with store.session() as db:
        db.add(job)
        db.commit()


def due(store: Store, *, now: int, limit: int = 100) -> list[Due]:
    with store.reader() as conn:
        rows = conn.execute(
            text(
                "SELECT id, owner, next_run_at, running_run_id FROM job "
                "WHERE next_run_at IS NOT NULL AND next_run_at <= :now AND NOT paused "
                "AND deleted_at IS NULL ORDER BY next_run_at LIMIT :limit"
            ),
            {"now": now, "limit": limit},
        ).all()
    return [Due(str(r[0]), str(r[1]), int(r[2]), r[3] is not None) for r in rows]


def next_due_at(store: Store) -> int | None:
    with store.reader() as conn:
        found = conn.execute(
            text(
                "SELECT MIN(next_run_at) FROM job "
                "WHERE NOT paused AND deleted_at IS NULL AND next_run_at IS NOT NULL"
            )
        ).scalar()
    return None if found is None else int(found)


def fire(
    store: Store, tick: Due, *, next_run_at: int, missed: int, launcher: str, now: float
) -> str | None:
    """Claim `tick` and record its run; the run's id, or None when another scheduler
    claimed it first (or the job moved on: paused, edited, deleted)."""
    run_id = new_id("jrun")
    status = "skipped" if tick.busy else "queued"
    with store.begin() as conn:
        claimed = conn.execute(
            text(
                "UPDATE job SET next_run_at = :next, "
                "running_run_id = CASE WHEN :busy THEN running_run_id ELSE :run END "
                "WHERE id = :id AND next_run_at = :due AND NOT paused AND deleted_at IS NULL"
            ),
            {
                "next": next_run_at,
                "busy": tick.busy,
                "run": run_id,
                "id": tick.job_id,
                "due": tick.due,
            },
        ).rowcount
        if claimed != 1:
            return None
        conn.execute(
            text(
                'INSERT INTO job_run (id, job_id, owner, "trigger", scheduled_for, missed, '
                "status, exit_reason, upstream_calls, launcher, created_at) VALUES (:id, :job, "
                ":owner, 'schedule', :due, :missed, :status, :reason, 0, :launcher, :now)"
            ),
            {
                "id": run_id,
                "job": tick.job_id,
                "owner": tick.owner,
                "due": tick.due,
                "missed": missed,
                "status": status,
                "reason": "overlap" if tick.busy else None,
                "launcher": launcher,
                "now": now,
            },
        )
    return run_id


def runs(store: Store, *, job_id: str) -> list[JobRunRow]:
    with store.session() as db:
        return list(db.exec(select(JobRunRow).where(JobRunRow.job_id == job_id)))
