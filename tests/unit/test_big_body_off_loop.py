"""A 10,000-message body is parsed and validated without silencing the event loop.

Counted, not timed: a task that only yields counts how often the loop ran while the body
was parsed, then while it was validated. Either done on the loop counts zero (the loop
cannot run another task in the middle of a synchronous call); on a thread it counts many.
The sliced validation's answer and errors are the whole validation's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from app.api.chat.parse import SLICE, validate_request, validated
from app.api.http.body_limits import OFF_LOOP_BYTES, read_json_body
from app.api.http.errors import ApiError

T = TypeVar("T")


def _body(n: int) -> dict[str, Any]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: " + "w " * 60}
        for i in range(n)
    ]
    return {"model": "courier", "messages": messages}


async def _ticks_during(work: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    ticks = 0
    done = False

    async def tick() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    before = ticks
    try:
        result = await work()
        during = ticks - before  # read before the ticker's last turn below
    finally:
        done = True
        await ticker
    return result, during


async def test_a_big_body_parses_and_validates_while_the_loop_runs() -> None:
    raw = json.dumps(_body(10_000)).encode()
    assert len(raw) >= OFF_LOOP_BYTES
    data, parsing = await _ticks_during(lambda: read_json_body(raw))
    chat, validating = await _ticks_during(lambda: validated(data))
    assert parsing > 0
    assert validating > 0
    assert len(chat.messages) == 10_000
    assert chat == validate_request(data)


async def test_an_error_in_a_late_slice_names_the_client_s_own_index() -> None:
    data = _body(3 * SLICE)
    data["messages"][2 * SLICE + 5]["role"] = "robot"
    with pytest.raises(ApiError) as sliced:
        await validated(data)
    with pytest.raises(ApiError) as whole:
        validate_request(data)
    assert sliced.value.param == whole.value.param == f"messages[{2 * SLICE + 5}].role"
    assert sliced.value.message == whole.value.message
