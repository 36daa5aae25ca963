"""On the shipped defaults (no cap changed), 100 concurrent streamed turns from one client
address are all answered (issue 30: with 10 turns and 64 connections per address, all but
ten were refused). Counted: every stream ends with its answer and `[DONE]`, none refused;
and the server did run them at once (the simulator saw 100 requests before any stream
ended)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

STREAMS = 100


@pytest.fixture
def on_defaults(servers: ServerFactory) -> Server:
    return servers()


def test_a_hundred_concurrent_streams_from_one_address_on_defaults(
    on_defaults: Server, sim: Simulator
) -> None:
    url = f"{on_defaults.base_url}/v1/chat/completions"
    # About 10 s per answer: every stream is still running when the last one starts.
    sim.configure(tokens_per_second=20)
    sim.script([{"reply": {"text": " ".join(["word"] * 200)}}] * STREAMS)
    first_end: list[int] = []

    async def one(client: httpx.AsyncClient, n: int) -> tuple[int, bool]:
        body = {
            "model": "courier",
            "stream": True,
            "messages": [{"role": "user", "content": f"caller {n}"}],
        }
        async with client.stream(
            "POST", url, json=body, headers=on_defaults.headers(), timeout=120
        ) as resp:
            lines = [line async for line in resp.aiter_lines() if line]
        if not first_end:
            first_end.append(len(sim.requests()))
        return resp.status_code, lines[-1:] == ["data: [DONE]"] and "word" in "".join(lines)

    async def scenario() -> list[tuple[int, bool]]:
        limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=STREAMS)
        async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
            return await asyncio.gather(*(one(client, n) for n in range(STREAMS)))

    try:
        results = asyncio.run(scenario())
    finally:
        sim.reset()
    assert [r for r in results if r != (200, True)] == []
    assert first_end == [STREAMS], "the streams did not all run at once"
