"""Requests held in flight at the simulator, then probes: how the e2e tests of a cap fill
it (issue 30: per-IP behind a proxy, per end user) without asserting any timing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx

from tests.support.sim import Simulator

HOLD = {"reply": {"text": "late"}, "fault": {"delay_ms": 120_000}}
"""A step that keeps its request waiting (the test cancels it when done)."""
QUICK = {"reply": {"text": "quick"}}


async def post_turn(client: httpx.AsyncClient, url: str, **headers: str) -> httpx.Response:
    # Each its own words: an identical body would be taken for a retry of the first.
    words = f"hi {uuid.uuid4()}"
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": words}]}
    response = await client.post(url, json=body, headers=headers, timeout=60)
    await response.aclose()
    return response


async def held_then(
    sim: Simulator,
    url: str,
    auth: dict[str, str],
    *,
    held: list[tuple[httpx.AsyncClient, dict[str, str]]],
    probes: list[tuple[httpx.AsyncClient, dict[str, str]]],
) -> list[httpx.Response]:
    """Start `held` requests, wait until the simulator has them all (each is then in
    flight inside Courier), send `probes` one by one, and return the probes' responses."""
    sim.script([HOLD] * len(held) + [QUICK] * len(probes))
    waiting = [asyncio.create_task(post_turn(c, url, **auth, **h)) for c, h in held]
    try:
        for _ in range(300):
            if len(sim.requests()) >= len(held):
                break
            await asyncio.sleep(0.05)
        assert len(sim.requests()) == len(held), "the held requests never reached the upstream"
        return [await post_turn(c, url, **auth, **h) for c, h in probes]
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


def error_code(response: httpx.Response) -> str | None:
    if response.status_code == 200:
        return None
    error: dict[str, Any] = response.json()["error"]
    return str(error["code"])
