"""Scheduled jobs over HTTP against the real server and the simulator: a job run now and
polled to its cost, a run stopped by its hard cap before any upstream call, a schedule
firing on its own (a six-field cron every 2 s, counted, never timed), and another key's
job answering 404 on every verb.
"""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.support.server import ON_POSTGRES, Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.waiting import wait_for

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef"


@pytest.fixture(scope="module")
def jobs_server(module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> Server:
    config = tmp_path_factory.mktemp("jobs-config") / "keys.toml"
    config.write_text(
        f'[[keys]]\nname = "alice"\nkey = "{ALICE}"\nscopes = ["chat"]\n\n'
        f'[[keys]]\nname = "bob"\nkey = "{BOB}"\nscopes = ["chat"]\n'
    )
    return module_servers(
        COURIER_CONFIG=str(config),
        COURIER_JOB_MIN_INTERVAL_S="1",
        COURIER_RESPONSE_EVENT_FLUSH_S="0.2",
    )


def _client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def _job(client: httpx.Client, **fields: Any) -> dict[str, Any]:
    body = {"name": "digest", "schedule": "@daily", "input": "summarise", "max_cost_usd": 1}
    created = client.post("/v1/jobs", json=body | fields)
    assert created.status_code == 201, created.text
    job: dict[str, Any] = created.json()
    return job


def _ended_run(client: httpx.Client, job_id: str, run_id: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def ended() -> bool:
        runs = client.get(f"/v1/jobs/{job_id}/runs").json()["data"]
        found[:] = [r for r in runs if r["id"] == run_id]
        return bool(found) and found[0]["status"] not in ("queued", "in_progress")

    wait_for(ended)
    return found[0]


def test_a_job_run_now_completes_with_its_response_and_cost(
    sim: Simulator, jobs_server: Server
) -> None:
    sim.script([{"reply": {"text": "Here is the digest."}}])
    with _client(jobs_server, ALICE) as alice:
        job = _job(alice)
        assert job["object"] == "job" and job["next_run_at"] is not None
        started = alice.post(f"/v1/jobs/{job['id']}/run")
        assert started.status_code == 202, started.text
        run = _ended_run(alice, job["id"], started.json()["id"])
        assert run["trigger"] == "manual"
        assert (run["status"], run["exit_reason"], run["upstream_calls"]) == (
            "completed",
            "completed",
            1,
        )
        response = alice.get(f"/v1/responses/{run['response_id']}").json()
        assert response["status"] == "completed"
        assert response["output"][0]["content"][0]["text"] == "Here is the digest."
        # The run's cost is the response's own, from the one ledger.
        assert run["cost_status"] != "unknown"
        assert run["cost_usd"] == response["usage"]["courier"]["cost"]["amount_usd"]
        assert Decimal(run["cost_usd"]) > 0
        listed = alice.get(f"/v1/jobs/{job['id']}").json()
        assert listed["last_run"]["id"] == run["id"]
    assert len(sim.requests()) == 1


def test_a_tiny_hard_cap_stops_the_run_before_any_upstream_call(
    sim: Simulator, jobs_server: Server
) -> None:
    sim.script([{"reply": {"text": "must never be asked for"}}])
    with _client(jobs_server, ALICE) as alice:
        # Far below what the first call's prompt alone could cost: refused unsent.
        job = _job(alice, name="capped", max_cost_usd="0.00001")
        run_id = alice.post(f"/v1/jobs/{job['id']}/run").json()["id"]
        run = _ended_run(alice, job["id"], run_id)
        assert run["exit_reason"] == "spend_limit"
        assert run["status"] == "failed"
        assert run["upstream_calls"] == 0
        assert "cap" in (run["error"] or "")
    assert sim.requests() == []


def test_a_schedule_fires_on_its_own_and_each_run_is_counted(
    sim: Simulator, jobs_server: Server
) -> None:
    with _client(jobs_server, ALICE) as alice:
        job = _job(alice, name="every two seconds", schedule="*/2 * * * * *")
        runs: list[dict[str, Any]] = []

        def two_completed() -> bool:
            runs[:] = alice.get(f"/v1/jobs/{job['id']}/runs").json()["data"]
            return sum(r["status"] == "completed" for r in runs) >= 2

        wait_for(two_completed)
        paused = alice.patch(f"/v1/jobs/{job['id']}", json={"paused": True})
        assert paused.status_code == 200, paused.text
        assert paused.json()["paused"] is True and paused.json()["next_run_at"] is None

        def settled() -> bool:
            runs[:] = alice.get(f"/v1/jobs/{job['id']}/runs").json()["data"]
            return all(r["status"] not in ("queued", "in_progress") for r in runs)

        wait_for(settled)
    assert {r["trigger"] for r in runs} == {"schedule"}
    ticks = [r["scheduled_for"] for r in runs]
    assert len(ticks) == len(set(ticks)) and all(t % 2 == 0 for t in ticks)
    completed = [r for r in runs if r["status"] == "completed"]
    assert all(r["status"] in ("completed", "skipped") for r in runs)
    # One upstream call per completed run, none for a skipped (overlapping) tick.
    assert len(sim.requests()) == sum(r["upstream_calls"] for r in completed) == len(completed)


def test_another_key_s_job_is_404_on_every_verb_and_left_unchanged(
    sim: Simulator, jobs_server: Server
) -> None:
    with _client(jobs_server, ALICE) as alice, _client(jobs_server, BOB) as bob:
        job = _job(alice, name="alice's")
        path = f"/v1/jobs/{job['id']}"
        answers = [
            bob.get(path),
            bob.patch(path, json={"paused": True}),
            bob.post(f"{path}/run"),
            bob.get(f"{path}/runs"),
            bob.delete(path),
        ]
        for answer in answers:
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == "job_not_found"
        missing = bob.get("/v1/jobs/job_doesnotexist000000000000")
        assert missing.json() == answers[0].json() | {
            "error": answers[0].json()["error"]
            | {"message": "job 'job_doesnotexist000000000000' not found"}
        }
        assert job["id"] not in [j["id"] for j in bob.get("/v1/jobs").json()["data"]]
        after = alice.get(path).json()
        assert after["paused"] is False and after["last_run"] is None
    assert sim.requests() == []


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"schedule": "not a cron"}, "schedule"),
        ({"schedule": "0 0 30 2 *"}, "schedule"),  # February 30th: never fires
        ({"max_cost_usd": None}, "max_cost_usd"),
        ({"max_cost_usd": 0}, "max_cost_usd"),
        ({"max_cost_usd_typo": 1}, "max_cost_usd_typo"),
        ({"profile": "no-such-model"}, "profile"),
        ({"session": "sometimes"}, "session"),
    ],
)
def test_a_bad_job_is_a_400_naming_the_param(
    jobs_server: Server, fields: dict[str, Any], param: str
) -> None:
    body = {"name": "bad", "schedule": "@hourly", "input": "x", "max_cost_usd": 1} | fields
    body = {k: v for k, v in body.items() if v is not None}
    with _client(jobs_server, ALICE) as alice:
        before = len(alice.get("/v1/jobs").json()["data"])
        answer = alice.post("/v1/jobs", json=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["param"] == param
        assert error["type"] == "invalid_request_error"
        assert len(alice.get("/v1/jobs").json()["data"]) == before


def test_a_busy_job_refuses_a_second_run_and_deleting_it_cancels_the_run(
    sim: Simulator, jobs_server: Server
) -> None:
    stalled = {"stall_after_events": 3, "stall_ms": 600_000}
    sim.script([{"reply": {"text": "one two three four five six"}, "fault": stalled}])
    with _client(jobs_server, ALICE) as alice:
        job = _job(alice, name="slow")
        run_id = alice.post(f"/v1/jobs/{job['id']}/run").json()["id"]
        wait_for(lambda: len(sim.requests()) == 1)
        busy = alice.post(f"/v1/jobs/{job['id']}/run")
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "job_busy"
        runs = alice.get(f"/v1/jobs/{job['id']}/runs").json()["data"]
        response_id = runs[0]["response_id"]
        assert (runs[0]["id"], runs[0]["status"]) == (run_id, "in_progress")
        assert alice.delete(f"/v1/jobs/{job['id']}").status_code == 200
        assert alice.get(f"/v1/jobs/{job['id']}").status_code == 404
        assert job["id"] not in [j["id"] for j in alice.get("/v1/jobs").json()["data"]]
        wait_for(lambda: alice.get(f"/v1/responses/{response_id}").json()["status"] == "cancelled")
    if not ON_POSTGRES:  # the run is kept, ended as its response did (read behind the API)
        with sqlite3.connect(jobs_server.data_dir / "courier.db") as db:
            wait_for(
                lambda: (
                    db.execute("SELECT status FROM job_run WHERE id = ?", (run_id,)).fetchone()
                    == ("cancelled",)
                )
            )
    assert len(sim.requests()) == 1


def test_a_continue_job_s_runs_share_one_session(sim: Simulator, jobs_server: Server) -> None:
    sim.script([{"reply": {"text": "first answer"}}, {"reply": {"text": "second answer"}}])
    with _client(jobs_server, ALICE) as alice:
        job = _job(alice, name="diary", session="continue", input="and today?")
        runs = []
        for _ in range(2):
            run_id = alice.post(f"/v1/jobs/{job['id']}/run").json()["id"]
            runs.append(_ended_run(alice, job["id"], run_id))
        assert [r["status"] for r in runs] == ["completed", "completed"]
        assert runs[0]["session_id"] == runs[1]["session_id"]
        assert alice.get(f"/v1/jobs/{job['id']}").json()["session_id"] == runs[0]["session_id"]
    second = json.dumps(json.loads(sim.requests()[1]["body"])["messages"])
    assert "first answer" in second
