"""The job runner: each run is a background response (docs/background.md) started in-process
under the job owner's identity, with the job's `max_cost_usd` as a *hard* request cap
(no upstream call is sent that could pass it; docs/jobs.md).

The run row follows the response: `in_progress` with its response and session once the
turn opened, then status, exit reason, cost and calls once the response's final record
is stored. A run that cannot start (the owner's key is gone, no turn slot, a refused
request) is recorded `failed` with the reason, so the job never waits on a run nobody
carries. The scheduler loop (`app/api/jobs/service.py`) and the run-now route hand runs here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from app.agent.events import TurnFinished
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError
from app.api.responses.serving import ResponsesServing
from app.api.responses.wire import ResponseCreateRequest
from app.api.retries import Retry
from app.api.turn_serving import Asked
from app.db import job_store
from app.db import session_query as q
from app.db.background_store import TERMINAL
from app.db.job_models import JobRow
from app.db.job_store import RunEnd
from app.db.store import Store
from app.security.principal import Principal
from app.security.rate_limits import LimitExceeded, Limits

log = logging.getLogger(__name__)


class JobRunner:
    def __init__(
        self,
        store: Store,
        *,
        serving: ResponsesServing,
        principal_of: Callable[[str], Principal | None],
        limits: Limits,
        pause_after_failures: int = 5,
    ) -> None:
        self.store = store
        self.serving = serving
        self.principal_of = principal_of
        """The key behind an owner fingerprint (None: no longer configured)."""
        self.limits = limits
        self.pause_after_failures = pause_after_failures
        self._watching: set[asyncio.Task[None]] = set()

    async def launch(self, run_id: str) -> None:
        """Start queued run `run_id`; a run that cannot start is recorded `failed`."""
        prepared = await asyncio.to_thread(self._prepare, run_id)
        if prepared is None:
            return
        job, principal, request = prepared
        end_user = job.end_user or None
        try:
            slot = self.limits.acquire_turn(principal, end_user=end_user)
        except LimitExceeded as exc:
            await asyncio.to_thread(self._end, run_id, RunEnd("failed", "capacity", exc.message))
            return
        try:
            started = await self.serving.start(
                request,
                Asked(principal, OnBehalf(end_user=end_user)),
                # Unique per run, and a first try: a run never reattaches to another's turn.
                retry=Retry(digest=run_id, first_try=True),
                hard_cap=Decimal(job.max_cost_usd),
            )
        except ApiError as exc:
            slot.release()
            end = RunEnd("failed", exc.code or "refused", exc.message)
            await asyncio.to_thread(self._end, run_id, end)
            return
        except BaseException:
            slot.release()
            self._end(run_id, RunEnd("failed", "server_error", "the run could not start"))
            raise
        assert started.handle.task is not None
        slot.bind(started.handle.task)
        shell = started.shell
        await asyncio.to_thread(self._started, job, run_id, shell.id, shell.session_id)
        watch = asyncio.create_task(self._finish(run_id, started.done), name=f"job-run-{run_id}")
        self._watching.add(watch)
        watch.add_done_callback(self._watching.discard)

    def _prepare(self, run_id: str) -> tuple[JobRow, Principal, ResponseCreateRequest] | None:
        """The queued run's job, owner and request (in a thread: store reads); None when
        there is nothing to start, the run then ended if it cannot be."""
        run = job_store.get_run(self.store, run_id)
        if run is None or run.status != "queued":
            return None
        job = job_store.get(self.store, run.job_id)
        if job is None:
            self._end(run_id, RunEnd("failed", "job_deleted"))
            return None
        principal = self.principal_of(job.owner)
        if principal is None:
            # Missing state means deny: a removed key's jobs stop running.
            self._end(run_id, RunEnd("failed", "owner_gone", "the job's API key is gone"))
            job_store.update(self.store, job.id, paused=True, next_run_at=None)
            return None
        return job, principal, self._request(job)

    def _started(self, job: JobRow, run_id: str, response_id: str, session_id: str) -> None:
        job_store.run_started(self.store, run_id, response_id=response_id, session_id=session_id)
        if job.session_mode == "continue" and job.session_id is None:
            job_store.update(self.store, job.id, session_id=session_id)

    def _request(self, job: JobRow) -> ResponseCreateRequest:
        previous = None
        if job.session_mode == "continue":
            previous = job_store.last_response_id(self.store, job_id=job.id)
        request: dict[str, Any] = {
            "model": job.profile,
            "input": json.loads(job.input),
            "instructions": job.instructions,
            "background": True,
            "previous_response_id": previous,
        }
        return ResponseCreateRequest.model_validate(request)

    async def _finish(
        self, run_id: str, done: asyncio.Future[tuple[dict[str, Any], TurnFinished]]
    ) -> None:
        try:
            final, finished = await done
        except Exception as exc:
            log.exception("job run %s: its response was not recorded", run_id)
            end = RunEnd("failed", "server_error", str(exc) or type(exc).__name__)
        else:
            error = final.get("error")
            end = RunEnd(
                status=str(final["status"]),
                exit_reason=finished.exit_reason,
                error=str(error.get("message")) if isinstance(error, dict) else None,
                cost_usd=None if finished.cost.amount is None else str(finished.cost.amount),
                cost_status=finished.cost.status,
                upstream_calls=finished.upstream_calls,
            )
        await asyncio.to_thread(self._end, run_id, end)

    def _end(self, run_id: str, end: RunEnd) -> None:
        job_store.run_ended(self.store, run_id, end, pause_after=self.pause_after_failures)

    async def cancel(self, run_id: str) -> None:
        """Stop a run in flight (its response cancelled, as `POST .../cancel` does); the
        run then ends `cancelled` through its response's final record."""
        run = await asyncio.to_thread(job_store.get_run, self.store, run_id)
        if run is None or run.response_id is None or self.serving.background is None:
            return
        row = await asyncio.to_thread(q.get_response, self.store, response_id=run.response_id)
        if row is not None:
            await self.serving.background.cancel(row)

    async def aclose(self) -> None:
        """At shutdown, after the turns and their final records: the runs' ends land too."""
        if self._watching:
            await asyncio.wait(list(self._watching), timeout=10.0)


def repair_unfinished_runs(store: Store) -> int:
    """At startup, after background responses were repaired: a run a dead process left
    queued or running is ended as its response was (`failed`, `interrupted`, when it had
    none), and its job freed. Nothing is run again. Returns how many."""
    repaired = 0
    for run in job_store.unfinished_runs(store):
        status = job_store.response_status(store, response_id=run.response_id)
        ended = status if status in TERMINAL else "failed"
        end = RunEnd(ended, "interrupted", "the process running it stopped")
        job_store.run_ended(store, run.id, end, pause_after=1_000_000)
        repaired += 1
    if repaired:
        log.warning("ended %d job run(s) a previous process left running", repaired)
    return repaired
