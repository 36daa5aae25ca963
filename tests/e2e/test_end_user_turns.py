"""COURIER_MAX_TURNS_PER_END_USER over real HTTP: one end user of an app's key cannot take
every turn the key may run; another end user of the same key, and a request naming none,
still pass. Counted with turns held at the simulator, never timed."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.held import error_code, held_then
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

PER_USER = 2


@pytest.fixture
def capped(servers: ServerFactory) -> Server:
    return servers(COURIER_MAX_TURNS_PER_END_USER=str(PER_USER))


def test_one_end_user_is_held_to_its_share_of_the_key(capped: Server, sim: Simulator) -> None:
    url = f"{capped.base_url}/v1/chat/completions"
    alice = {"X-Courier-End-User": "alice"}

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await held_then(
                sim,
                url,
                capped.headers(),
                held=[(client, alice)] * PER_USER,
                probes=[
                    (client, alice),
                    (client, {"X-Courier-End-User": "bob"}),
                    (client, {}),
                ],
            )

    refused, bob, nobody = asyncio.run(scenario())
    assert error_code(refused) == "end_user_turn_limit"
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert error_code(bob) is None and error_code(nobody) is None
