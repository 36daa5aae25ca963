"""One keepalive loop (`app/api/http/sse.py`'s `turn_stream`) under all three streams.

In-process, with real handles and each endpoint's own frames: a keepalive whenever the
client has heard nothing for the interval (events it did not ask to see are silence too),
the Responses head at once and the chat head with the first bytes, numbered replay frames
after `after`, and a client leaving stops the turn unless it only watched it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from app.agent.events import ToolStarted, TurnEvent, TurnFinished, TurnText
from app.agent.turns.handle import TurnHandle
from app.api.chat.render import ChatFrames, CompletionRenderer
from app.api.http.sse import KEEPALIVE, FinalFrame, TurnFrames, turn_stream
from app.api.responses.render import ResponseFrames, ResponseShell
from app.api.responses.wire import ResponseCreateRequest
from app.api.sessions.events import ReplayFrames
from app.providers.pricing import Cost
from app.providers.usage import Usage

FINISHED = TurnFinished("completed", "stop", Usage(), Cost.zero(), 1)


def _running(turn_id: str = "turn_s") -> TurnHandle:
    """A handle whose turn runs until cancelled, as the manager's do."""
    handle = TurnHandle(turn_id, "sess_s")
    handle.task = asyncio.get_running_loop().create_future()
    return handle


def _responses(handle: TurnHandle, *, tool_events: bool = False) -> ResponseFrames:
    request = ResponseCreateRequest.model_validate({"model": "courier", "input": "hi"})
    shell = ResponseShell(id="resp_s", model="courier", request=request, session_id="sess_s")
    done: asyncio.Future[tuple[dict[str, Any], TurnFinished]] = (
        asyncio.get_running_loop().create_future()
    )
    final = shell.body(status="completed", output=[])
    done.set_result((final, FINISHED))
    return ResponseFrames(shell, handle, done, tool_events=tool_events)


def _events(writes: list[bytes]) -> list[str]:
    """The `event:` names and comments of a stream's writes, in order."""
    lines = b"".join(writes).decode().split("\r\n")
    return [line for line in lines if line.startswith(("event: ", ": "))]


async def _publish(handle: TurnHandle, events: list[TurnEvent], every: float) -> None:
    for event in events:
        await asyncio.sleep(every)
        handle.publish(event)


async def test_events_the_client_did_not_ask_for_are_silence() -> None:
    """Tool events with no opt-in write nothing, so keepalives must still come between
    them (a loop that waited per event would have stayed silent for the whole tool run)."""
    handle = _running()
    stream = turn_stream(handle, _responses(handle), 0.15)
    head = await stream.__anext__()  # at once: `response.created` names the response
    assert _events([head]) == ["event: response.created", "event: response.in_progress"]
    quiet = [ToolStarted(call_id=f"c{i}", name="wait") for i in range(12)]
    publisher = asyncio.create_task(_publish(handle, [*quiet, TurnText("done"), FINISHED], 0.05))
    writes = [write async for write in stream]
    await publisher
    assert writes.count(KEEPALIVE) >= 2
    assert not any(b"courier.tool" in write for write in writes)
    assert type(writes[-1]) is FinalFrame and b"response.completed" in writes[-1]
    assert handle.delivered and not handle.task.cancelled()


async def test_opted_in_tool_events_are_named_frames() -> None:
    handle = _running()
    stream = turn_stream(handle, _responses(handle, tool_events=True), 10)
    handle.publish(ToolStarted(call_id="c1", name="wait"))
    handle.publish(FINISHED)
    names = _events([write async for write in stream])
    assert names[2] == "event: courier.tool" and names[-1] == "event: response.completed"


async def test_the_chat_head_rides_with_the_first_bytes() -> None:
    handle = _running()
    frames = ChatFrames(CompletionRenderer("m"), handle)
    handle.publish(TurnText("hi"))
    handle.publish(FINISHED)
    writes = [write async for write in turn_stream(handle, frames, 10)]
    assert len(writes) == 1  # role, text, finish and [DONE] ready together: one write
    assert writes[0].startswith(b'id: 0\r\ndata: {"id"') and b'"role":"assistant"' in writes[0]
    assert writes[0].endswith(b"id: 2.2\r\ndata: [DONE]\r\n\r\n")  # finish is 2.1


async def test_a_replay_numbers_what_follows_after() -> None:
    handle = _running("turn_r")
    for text in ("a", "b", "c"):
        handle.publish(TurnText(text))
    replay = turn_stream(handle, ReplayFrames(handle.turn_id, 1), 10, after=1)
    first = await replay.__anext__()  # what was missed, in one write
    handle.publish(FINISHED)
    last = await replay.__anext__()
    lines = (first + last).decode().split("\r\n")
    assert [line for line in lines if line.startswith("id: ")] == ["id: 2", "id: 3", "id: 4"]
    payloads = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert [(p["seq"], p["type"]) for p in payloads] == [
        (2, "text"),
        (3, "text"),
        (4, "finished"),
    ]
    handle.finished_at = 1.0  # as the manager marks a closed turn
    # Past the end of a finished turn nothing is missed and nothing more comes: no wait.
    assert [w async for w in turn_stream(handle, ReplayFrames("turn_r", 4), 10, after=4)] == []


async def test_a_client_leaving_stops_the_turn_unless_it_only_watched() -> None:
    async def leave(frames: TurnFrames, handle: TurnHandle) -> None:
        stream = turn_stream(handle, frames, 10)
        handle.publish(TurnText("partial"))
        await stream.__anext__()
        await stream.aclose()  # what the response does when the client hangs up

    watched = _running("turn_w")
    await leave(ReplayFrames(watched.turn_id, 0), watched)
    assert watched.task is not None and not watched.task.cancelled()
    for make in (lambda h: ChatFrames(CompletionRenderer("m"), h), _responses):
        handle = _running()
        await leave(make(handle), handle)
        assert handle.task is not None and handle.task.cancelled()


async def test_a_keepalive_due_among_ready_events_is_not_rendered_as_one() -> None:
    """A slow client leaves events queued past the keepalive interval, so the beat lands
    behind them; the batch is the sign of life, and the beat must not become a frame."""
    handle = _running("turn_b")
    replay = turn_stream(handle, ReplayFrames(handle.turn_id, 0), 0.05)
    handle.publish(TurnText("a"))
    first = await replay.__anext__()
    handle.publish(TurnText("b"))
    await asyncio.sleep(0.12)  # the client is still writing `first`: beats come due
    handle.publish(TurnText("c"))
    handle.publish(FINISHED)
    rest = [write async for write in replay]
    lines = b"".join([first, *rest]).decode().split("\r\n")
    assert [line for line in lines if line.startswith("id: ")] == [
        "id: 1",
        "id: 2",
        "id: 3",
        "id: 4",
    ]
