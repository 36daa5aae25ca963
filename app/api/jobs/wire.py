"""The jobs API's wire models: strict, unlike the OpenAI-shaped endpoints. An unknown field
is a 400, because a typo in `max_cost_usd` silently dropped would run a job without the
cap its creator meant to set.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.db.job_models import JobRow, JobRunRow
from app.schedule.cron import Schedule, expand


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobCreate(_Strict):
    name: str = Field(min_length=1, max_length=128)
    schedule: str = Field(min_length=1, max_length=256)
    """A cron expression in UTC (five fields, or six with seconds first), or an alias."""
    input: str | list[dict[str, Any]] = Field(min_length=1)
    """What each run sends, as a Responses request's `input`."""
    instructions: str | None = None
    profile: str | None = Field(default=None, min_length=1, max_length=256)
    """A profile (model) name; the default profile when unset."""
    max_cost_usd: Decimal | None = Field(default=None, gt=0)
    """Each run's hard cost cap; required unless COURIER_JOB_DEFAULT_MAX_COST_USD is set."""
    session: Literal["new", "continue"] = "new"
    paused: bool = False


class JobPatch(_Strict):
    name: str | None = Field(default=None, min_length=1, max_length=128)
    paused: bool | None = None
    schedule: str | None = Field(default=None, min_length=1, max_length=256)
    max_cost_usd: Decimal | None = Field(default=None, gt=0)


def explain(expr: str) -> str:
    try:
        return Schedule(expand(expr)).explain()
    except Exception:  # an explanation is a courtesy, never a failure of the read
        return ""


def run_out(run: JobRunRow) -> dict[str, Any]:
    return {
        "id": run.id,
        "object": "job.run",
        "job_id": run.job_id,
        "trigger": run.trigger,
        "scheduled_for": run.scheduled_for,
        "missed": run.missed,
        "status": run.status,
        "exit_reason": run.exit_reason,
        "error": run.error,
        "response_id": run.response_id,
        "session_id": run.session_id,
        "cost_usd": run.cost_usd,  # exact, as the usage ledger writes amounts
        "cost_status": run.cost_status,
        "upstream_calls": run.upstream_calls,
        "created_at": int(run.created_at),
        "started_at": None if run.started_at is None else int(run.started_at),
        "finished_at": None if run.finished_at is None else int(run.finished_at),
    }


def job_out(job: JobRow, last_run: JobRunRow | None) -> dict[str, Any]:
    return {
        "id": job.id,
        "object": "job",
        "name": job.name,
        "schedule": job.schedule,
        "schedule_explained": explain(job.schedule),
        "input": json.loads(job.input),
        "instructions": job.instructions,
        "profile": job.profile,
        "max_cost_usd": job.max_cost_usd,
        "session": job.session_mode,
        "session_id": job.session_id,
        "paused": job.paused,
        "next_run_at": job.next_run_at,
        "consecutive_failures": job.consecutive_failures,
        "created_at": int(job.created_at),
        "updated_at": int(job.updated_at),
        "last_run": None if last_run is None else run_out(last_run),
    }
