"""The process's scheduler loop: fire what is due (`app/schedule/scheduler.py`, each tick
once across processes), hand each queued run to the runner, sleep until the next tick or
`COURIER_SCHEDULER_TICK_S`, whichever is sooner. A job created, edited or run now wakes
it at once. Started in the app's lifespan and stopped before the store closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable

from fastapi import FastAPI

from app.api.jobs.runner import JobRunner, repair_unfinished_runs
from app.api.responses import router as responses
from app.api.responses.serving import ResponsesServing
from app.api.state import AppState
from app.config import Settings
from app.db import job_store, named_leases
from app.db.instance import instance_id
from app.db.store import Store
from app.schedule.cron import Schedule, expand
from app.schedule.scheduler import LEASE_NAME, Scheduler
from app.security.principal import Principal

log = logging.getLogger(__name__)

SERVICE = "jobs"
"""Where the lifespan puts the `JobService` on `app.state`."""
MIN_SLEEP_S = 0.5
"""The shortest nap: a process whose peer holds the scheduler lease sees due ticks it may
not fire, and must not spin on them."""


class JobService:
    def __init__(self, store: Store, *, runner: JobRunner, tick_s: float) -> None:
        self.store = store
        self.runner = runner
        self.tick_s = tick_s
        self.scheduler = Scheduler(
            store, holder=f"{instance_id()}/{secrets.token_hex(4)}", schedule_of=self._schedule_of
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.enabled = False
        """Started: jobs are served (off, the routes answer 404)."""

    def _schedule_of(self, job_id: str) -> Schedule | None:
        job = job_store.get(self.store, job_id)
        return None if job is None else Schedule(expand(job.schedule))

    def start(self) -> None:
        self.enabled = True
        self._task = asyncio.create_task(self._loop(), name="job-scheduler")

    def wake(self) -> None:
        self._wake.set()

    async def pass_once(self) -> None:
        """Fire every due tick this process can claim and launch the queued runs."""
        for run_id in await asyncio.to_thread(self.scheduler.tick):
            await self.runner.launch(run_id)  # a `skipped` (overlap) run is left as is

    async def run_now(self, job_id: str) -> str | None:
        """A manual run, launched; its id, or None while another run is in flight."""
        run_id = await asyncio.to_thread(
            job_store.claim_manual,
            self.store,
            job_id,
            launcher=self.scheduler.holder,
            now=time.time(),
        )
        if run_id is not None:
            await self.runner.launch(run_id)
        return run_id

    async def _loop(self) -> None:
        while True:
            try:
                await self.pass_once()
            except Exception:
                log.exception("scheduler: a pass failed; trying again at the next tick")
            nap = await asyncio.to_thread(self._nap_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), nap)
            self._wake.clear()

    def _nap_s(self) -> float:
        due = job_store.next_due_at(self.store)
        until = self.tick_s if due is None else due - time.time()
        return max(MIN_SLEEP_S, min(self.tick_s, until))

    async def stop(self) -> None:
        """Fire nothing more (at shutdown, before the turns drain)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def aclose(self) -> None:
        """After the turns ended and their responses were recorded: the runs' ends land,
        and the lease is given up for a peer to take at once."""
        if not self.enabled:
            return
        await self.stop()
        await self.runner.aclose()
        named_leases.release(self.store, LEASE_NAME, holder=self.scheduler.holder)


def install_jobs(
    app: FastAPI,
    settings: Settings,
    store: Store,
    principal_of: Callable[[str], Principal | None],
) -> JobService:
    """The jobs API's service on `app.state`, started (the runs a dead process left ended
    first) unless jobs are off, or background responses are (each run is one): then the
    routes answer 404 and `stop`/`aclose` do nothing."""
    serving: ResponsesServing = getattr(app.state, responses.SERVING)
    state: AppState = app.state.courier
    runner = JobRunner(store, serving=serving, principal_of=principal_of, limits=state.limits)
    service = JobService(store, runner=runner, tick_s=settings.scheduler_tick_s)
    setattr(app.state, SERVICE, service)
    if settings.jobs and serving.background is None:
        log.warning("COURIER_JOBS is on but COURIER_BACKGROUND is off: jobs are not served")
    if settings.jobs and serving.background is not None:
        repair_unfinished_runs(store)
        service.start()
    return service
