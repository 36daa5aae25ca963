"""`/v1/jobs`: scheduled jobs with a hard cost cap (docs/jobs.md). A job belongs to the key
that created it: another key's job answers 404 exactly like a missing one (the admin key
sees all), and a token bound to one session may not schedule work at all (403).
"""

from __future__ import annotations

import asyncio
import json
import time
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from app.api.http.body_limits import load_json_object
from app.api.http.deps import StateDep, authenticate, read_limited_body
from app.api.http.end_users import end_user_header
from app.api.http.errors import ApiError, validation_error
from app.api.jobs.service import SERVICE, JobService
from app.api.jobs.wire import JobCreate, JobPatch, job_out, run_out
from app.api.responses.router import responses_serving
from app.api.state import AppState
from app.db import job_store
from app.db.job_models import JobRow
from app.schedule.cron import ScheduleError, parse
from app.security.principal import CHAT, Principal

router = APIRouter()


def _service(request: Request) -> JobService:
    service: JobService | None = getattr(request.app.state, SERVICE, None)
    if service is None or not service.enabled:
        raise ApiError(404, "jobs are turned off on this server (COURIER_JOBS)", code="not_found")
    return service


def _principal(request: Request, state: AppState) -> Principal:
    principal = authenticate(request, state, CHAT)
    if principal.session_id is not None:
        raise ApiError(
            403, "a token bound to one session cannot manage jobs", code="insufficient_scope"
        )
    return principal


async def _asker(request: Request, state: StateDep) -> Principal:
    _service(request)
    return _principal(request, state)


AskerDep = Annotated[Principal, Depends(_asker)]
ServiceDep = Annotated[JobService, Depends(_service)]


async def reachable_job(job_id: str, principal: AskerDep, request: Request) -> JobRow:
    """The job, if the asker owns it (or is the admin); else the 404 a missing id gets."""
    store = _service(request).store
    job = await asyncio.to_thread(job_store.get, store, job_id)
    if job is None or not (principal.admin or job.owner == principal.owner):
        raise ApiError(404, f"job '{job_id}' not found", code="job_not_found")
    return job


JobDep = Annotated[JobRow, Depends(reachable_job)]


def _first_tick(expr: str, state: AppState, *, param: str = "schedule") -> tuple[str, int]:
    """The schedule as given and its first tick after now, or the 400 naming why not."""
    now = int(time.time())
    try:
        schedule = parse(expr, min_interval_s=state.settings.job_min_interval_s, now=now)
        return expr.strip(), schedule.next_after(now)
    except ScheduleError as exc:
        raise ApiError(400, str(exc), param=param, code="invalid_schedule") from None


def _cap(given: Decimal | None, state: AppState) -> Decimal:
    cap = given if given is not None else state.settings.job_default_max_cost_usd
    if cap is None:
        raise ApiError(
            400,
            "max_cost_usd is required: every run of a job has a hard cost cap "
            "(or set COURIER_JOB_DEFAULT_MAX_COST_USD)",
            param="max_cost_usd",
            code="missing_required_parameter",
        )
    return cap


async def _parsed(request: Request, state: AppState, model: type[JobCreate | JobPatch]) -> Any:
    data = load_json_object(await read_limited_body(request, state.settings.max_body_bytes))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _out(store: Any, job: JobRow) -> dict[str, Any]:
    runs = job_store.run_page(store, job_id=job.id, limit=1)
    return job_out(job, runs[0] if runs else None)


@router.post("/v1/jobs", status_code=201)
async def create_job(
    request: Request, state: StateDep, principal: AskerDep, service: ServiceDep
) -> Any:
    body: JobCreate = await _parsed(request, state, JobCreate)
    schedule, first = _first_tick(body.schedule, state)
    cap = _cap(body.max_cost_usd, state)
    profile = body.profile or state.settings.model_name
    try:
        responses_serving(request).turn_serving.resolve_profile(profile)
    except ApiError as exc:
        raise ApiError(400, exc.message, param="profile", code=exc.code) from None
    job = JobRow(
        id=job_store.new_id("job"),
        owner=principal.owner,
        end_user=end_user_header(request.headers, state.settings) or "",
        name=body.name,
        schedule=schedule,
        input=json.dumps(body.input),
        instructions=body.instructions,
        profile=profile,
        max_cost_usd=str(cap),
        session_mode=body.session,
        paused=body.paused,
        next_run_at=None if body.paused else first,
    )
    await asyncio.to_thread(job_store.add, service.store, job)
    service.wake()
    return JSONResponse(job_out(job, None), status_code=201)


@router.get("/v1/jobs")
async def list_jobs(principal: AskerDep, service: ServiceDep) -> Any:
    owner = None if principal.admin else principal.owner
    jobs = await asyncio.to_thread(job_store.listed, service.store, owner=owner)
    data = [await asyncio.to_thread(_out, service.store, job) for job in jobs]
    return {"object": "list", "data": data}


@router.get("/v1/jobs/{job_id}")
async def get_job(job: JobDep, service: ServiceDep) -> Any:
    return await asyncio.to_thread(_out, service.store, job)


@router.patch("/v1/jobs/{job_id}")
async def patch_job(job: JobDep, request: Request, state: StateDep, service: ServiceDep) -> Any:
    body: JobPatch = await _parsed(request, state, JobPatch)
    # An explicit null changes nothing: a job never loses its cap or its schedule.
    changes = {k: v for k, v in body.model_dump(exclude_unset=True).items() if v is not None}
    if "max_cost_usd" in changes:
        changes["max_cost_usd"] = str(changes["max_cost_usd"])
    paused = changes.get("paused", job.paused)
    rescheduled = "schedule" in changes
    schedule, first = _first_tick(changes.get("schedule", job.schedule), state)
    changes["schedule"] = schedule
    if paused:
        changes["next_run_at"] = None
    elif job.paused or rescheduled:
        # Resuming starts from the next tick after now: a pause is not "missed ticks".
        changes["next_run_at"] = first
    if job.paused and not paused:
        changes["consecutive_failures"] = 0
    updated = await asyncio.to_thread(job_store.update, service.store, job.id, **changes)
    if updated is None:
        raise ApiError(404, f"job '{job.id}' not found", code="job_not_found")
    service.wake()
    return await asyncio.to_thread(_out, service.store, updated)


@router.delete("/v1/jobs/{job_id}")
async def delete_job(job: JobDep, service: ServiceDep) -> Any:
    """Stops scheduling it and cancels a run in flight; its runs and their costs stay."""
    await asyncio.to_thread(
        job_store.update, service.store, job.id, deleted_at=time.time(), next_run_at=None
    )
    if job.running_run_id is not None:
        await service.runner.cancel(job.running_run_id)
    return {"id": job.id, "object": "job", "deleted": True}


@router.post("/v1/jobs/{job_id}/run", status_code=202)
async def run_job(job: JobDep, service: ServiceDep) -> Any:
    run_id = await service.run_now(job.id)
    if run_id is None:
        raise ApiError(409, f"a run of job '{job.id}' is in flight", code="job_busy")
    run = await asyncio.to_thread(job_store.get_run, service.store, run_id)
    assert run is not None
    return JSONResponse(run_out(run), status_code=202)


@router.get("/v1/jobs/{job_id}/runs")
async def list_runs(
    job: JobDep,
    service: ServiceDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: str | None = None,
) -> Any:
    page = await asyncio.to_thread(
        job_store.run_page, service.store, job_id=job.id, limit=limit + 1, after=after
    )
    data = [run_out(run) for run in page[:limit]]
    return {"object": "list", "data": data, "has_more": len(page) > limit}
