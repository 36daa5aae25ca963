"""The simulator's hang-up counts, over HTTP: a stream abandoned midway or while waiting is
counted, a completed answer is not. The compatibility suite reads these counts."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.sim import Simulator


def _wait_for_disconnect(sim: Simulator) -> dict[str, int]:
    deadline = time.monotonic() + 10
    while sim.stats()["disconnects"] < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    return sim.stats()


def test_stats_count_a_whole_request_abandoned_while_waiting(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "late"}, "fault": {"delay_ms": 10_000}}])
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{sim.base_url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": "Bearer k"},
            timeout=httpx.Timeout(10, read=0.3),
        )
    assert _wait_for_disconnect(sim) == {"model_requests": 1, "disconnects": 1}


def test_stats_count_a_stream_abandoned_midway(sim: Simulator) -> None:
    sim.configure(tokens_per_second=50)
    sim.script([{"reply": {"text": "word " * 300}}])
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    headers = {"Authorization": "Bearer k"}
    with httpx.stream(
        "POST", f"{sim.base_url}/v1/chat/completions", json=body, headers=headers
    ) as response:
        for number, _ in enumerate(response.iter_lines()):
            if number > 3:
                break
    assert _wait_for_disconnect(sim) == {"model_requests": 1, "disconnects": 1}


def test_stats_do_not_count_completed_answers(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a b c"}}] * 2)
    for stream in (False, True):
        response = httpx.post(
            f"{sim.base_url}/v1/chat/completions",
            json={"model": "m", "stream": stream, "messages": [{"role": "user", "content": "x"}]},
            headers={"Authorization": "Bearer k"},
        )
        assert response.status_code == 200
    assert sim.stats() == {"model_requests": 2, "disconnects": 0}
    sim.reset()
    assert sim.stats() == {"model_requests": 0, "disconnects": 0}
