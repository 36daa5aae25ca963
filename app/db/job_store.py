"""The jobs' SQL: store a job, find the due ones, and fire a tick exactly once.

`fire` is one transaction whose first statement is the compare-and-set on `next_run_at`
(a read first would let SQLite upgrade a stale snapshot), followed by the run's insert;
`UNIQUE(job_id, scheduled_for)` backs it. Two schedulers racing for one tick: one CAS
matches, the other's matches no row and it inserts nothing. This holds with or without
the scheduler lease, which only saves the losers' wasted work.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from sqlalchemy import text
from sqlmodel import col, select

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
        db.refresh(job)  # the commit expired it, and the caller reads it after


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


def get(store: Store, job_id: str) -> JobRow | None:
    with store.session() as db:
        row = db.get(JobRow, job_id)
    return None if row is None or row.deleted_at is not None else row


def listed(store: Store, *, owner: str | None) -> list[JobRow]:
    """The live jobs of `owner` (every owner's for None: the admin), oldest first."""
    with store.session() as db:
        query = select(JobRow).where(col(JobRow.deleted_at).is_(None))
        if owner is not None:
            query = query.where(JobRow.owner == owner)
        return list(db.exec(query.order_by(col(JobRow.created_at))))


def count_of(store: Store, *, owner: str) -> int:
    return len(listed(store, owner=owner))


def update(store: Store, job_id: str, **fields: object) -> JobRow | None:
    """Set `fields` on a live job (and its `updated_at`); the row after, or None."""
    with store.session() as db:
        row = db.get(JobRow, job_id)
        if row is None or row.deleted_at is not None:
            return None
        for name, value in fields.items():
            setattr(row, name, value)
        row.updated_at = time.time()
        db.add(row)
        db.commit()
        db.refresh(row)
        return row


def claim_manual(store: Store, job_id: str, *, launcher: str, now: float) -> str | None:
    """A run now: recorded `queued` only while no run of the job is in flight (one
    compare-and-set on `running_run_id`, as a tick's claim); its id, or None when busy."""
    run_id = new_id("jrun")
    with store.begin() as conn:
        claimed = conn.execute(
            text(
                "UPDATE job SET running_run_id = :run WHERE id = :id "
                "AND running_run_id IS NULL AND deleted_at IS NULL"
            ),
            {"run": run_id, "id": job_id},
        ).rowcount
        if claimed != 1:
            return None
        conn.execute(
            text(
                'INSERT INTO job_run (id, job_id, owner, "trigger", missed, status, '
                "upstream_calls, launcher, created_at) SELECT :rid, id, owner, 'manual', 0, "
                "'queued', 0, :launcher, :now FROM job WHERE id = :id"
            ),
            {"rid": run_id, "id": job_id, "launcher": launcher, "now": now},
        )
    return run_id


def get_run(store: Store, run_id: str) -> JobRunRow | None:
    with store.session() as db:
        return db.get(JobRunRow, run_id)


def run_started(store: Store, run_id: str, *, response_id: str, session_id: str) -> None:
    with store.begin() as conn:
        conn.execute(
            text(
                "UPDATE job_run SET status = 'in_progress', response_id = :resp, "
                "session_id = :sess, started_at = :now WHERE id = :id AND status = 'queued'"
            ),
            {"resp": response_id, "sess": session_id, "now": time.time(), "id": run_id},
        )


@dataclass(frozen=True, slots=True)
class RunEnd:
    status: str
    exit_reason: str | None
    error: str | None = None
    cost_usd: str | None = None
    cost_status: str | None = None
    upstream_calls: int = 0


def run_ended(store: Store, run_id: str, end: RunEnd, *, pause_after: int) -> None:
    """The run's end, and its job free for the next one, in one transaction: a failure
    counts toward `pause_after` consecutive ones (then the job is paused), a success
    resets the count."""
    failed = end.status != "completed"
    with store.begin() as conn:
        conn.execute(
            text(
                "UPDATE job_run SET status = :status, exit_reason = :reason, error = :error, "
                "cost_usd = :cost, cost_status = :cost_status, upstream_calls = :calls, "
                "finished_at = :now WHERE id = :id"
            ),
            {
                "status": end.status,
                "reason": end.exit_reason,
                "error": end.error,
                "cost": end.cost_usd,
                "cost_status": end.cost_status,
                "calls": end.upstream_calls,
                "now": time.time(),
                "id": run_id,
            },
        )
        conn.execute(
            text(
                "UPDATE job SET running_run_id = NULL, "
                "consecutive_failures = CASE WHEN :failed THEN consecutive_failures + 1 "
                "ELSE 0 END WHERE running_run_id = :id"
            ),
            {"failed": failed, "id": run_id},
        )
        conn.execute(
            text(
                "UPDATE job SET paused = TRUE, next_run_at = NULL "
                "WHERE consecutive_failures >= :limit AND id = (SELECT job_id FROM job_run "
                "WHERE id = :id)"
            ),
            {"limit": pause_after, "id": run_id},
        )


def run_page(store: Store, *, job_id: str, limit: int, after: str | None = None) -> list[JobRunRow]:
    """A job's runs, newest first, `limit` of them after the run `after` (its id)."""
    with store.session() as db:
        query = select(JobRunRow).where(JobRunRow.job_id == job_id)
        if after is not None and (anchor := db.get(JobRunRow, after)) is not None:
            query = query.where(col(JobRunRow.created_at) < anchor.created_at)
        query = query.order_by(col(JobRunRow.created_at).desc(), col(JobRunRow.id).desc())
        return list(db.exec(query.limit(limit)))


def unfinished_runs(store: Store) -> list[JobRunRow]:
    """Runs no process is carrying on: read at startup, before the scheduler starts."""
    with store.session() as db:
        return list(
            db.exec(select(JobRunRow).where(col(JobRunRow.status).in_(("queued", "in_progress"))))
        )


def last_response_id(store: Store, *, job_id: str) -> str | None:
    """The response of the job's newest run that has one: where `session: continue` goes on."""
    with store.reader() as conn:
        found = conn.execute(
            text(
                "SELECT response_id FROM job_run WHERE job_id = :id AND response_id IS NOT NULL "
                "ORDER BY created_at DESC LIMIT 1"
            ),
            {"id": job_id},
        ).scalar()
    return None if found is None else str(found)


def response_status(store: Store, *, response_id: str | None) -> str | None:
    """A response's stored status (None: no such response, or none named)."""
    if response_id is None:
        return None
    with store.reader() as conn:
        found = conn.execute(
            text("SELECT status FROM response_record WHERE id = :id"), {"id": response_id}
        ).scalar()
    return str(found) if found else None
