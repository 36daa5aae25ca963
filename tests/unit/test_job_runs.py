"""A job's runs in the store: a run now is refused while one is in flight (the same
compare-and-set as a tick's claim), a run's end frees the job and counts failures toward
the pause, and a run a dead process left running is ended at the next start, not run
again. Real SQLite, no server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.api.jobs.runner import repair_unfinished_runs
from app.db import job_store
from app.db.job_models import JobRow
from app.db.job_store import RunEnd
from app.db.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "jobs.db")
    job_store.add(
        opened,
        JobRow(
            id="job_a",
            owner="key_a",
            name="a",
            schedule="@daily",
            input='"hi"',
            profile="courier",
            max_cost_usd="1",
            next_run_at=1_800_000_000,
        ),
    )
    yield opened
    opened.close()


def _job(store: Store) -> JobRow:
    job = job_store.get(store, "job_a")
    assert job is not None
    return job


def test_a_run_now_is_refused_while_a_run_is_in_flight(store: Store) -> None:
    first = job_store.claim_manual(store, "job_a", launcher="me", now=1.0)
    assert first is not None and _job(store).running_run_id == first
    assert job_store.claim_manual(store, "job_a", launcher="me", now=2.0) is None
    job_store.run_ended(store, first, RunEnd("completed", "completed"), pause_after=5)
    assert _job(store).running_run_id is None
    assert job_store.claim_manual(store, "job_a", launcher="me", now=3.0) is not None
    runs = job_store.run_page(store, job_id="job_a", limit=10)
    assert [r.trigger for r in runs] == ["manual", "manual"]
    assert [r.scheduled_for for r in runs] == [None, None]  # NULLs repeat under UNIQUE


def test_failures_in_a_row_pause_the_job_and_a_success_resets_the_count(store: Store) -> None:
    def one(status: str) -> None:
        run_id = job_store.claim_manual(store, "job_a", launcher="me", now=1.0)
        assert run_id is not None
        job_store.run_ended(store, run_id, RunEnd(status, "x"), pause_after=3)

    one("failed")
    one("failed")
    one("completed")
    assert (_job(store).consecutive_failures, _job(store).paused) == (0, False)
    for _ in range(3):
        one("failed")
    job = _job(store)
    assert (job.consecutive_failures, job.paused, job.next_run_at) == (3, True, None)


def test_a_run_left_running_by_a_dead_process_is_ended_once_and_frees_the_job(
    store: Store,
) -> None:
    run_id = job_store.claim_manual(store, "job_a", launcher="dead", now=1.0)
    assert run_id is not None
    job_store.run_started(store, run_id, response_id="resp_gone", session_id="sess_x")
    assert repair_unfinished_runs(store) == 1
    run = job_store.get_run(store, run_id)
    assert run is not None
    assert (run.status, run.exit_reason, run.finished_at is not None) == (
        "failed",
        "interrupted",
        True,
    )
    assert _job(store).running_run_id is None
    assert repair_unfinished_runs(store) == 0
