"""Chat frames' ids are written in front of each frame's bytes (`ChatFrames`): the same
bytes `ServerSentEvent` writes for a frame with that id, and a resume drops exactly the
frames before its position."""

from __future__ import annotations

import asyncio

from app.agent.events import TurnFinished, TurnText
from app.agent.turns.handle import TurnHandle
from app.api.chat.render import ChatFrames, CompletionRenderer
from app.api.http.sse import EventPosition, ServerSentEvent, turn_stream
from app.providers.pricing import Cost
from app.providers.usage import Usage


def _finished() -> TurnFinished:
    return TurnFinished("completed", "stop", Usage(), Cost.zero(), 1)


def _frames(written: bytes) -> list[bytes]:
    return [part + b"\r\n\r\n" for part in written.split(b"\r\n\r\n")[:-1]]


def _whole(resume: EventPosition | None) -> bytes:
    async def run() -> bytes:
        handle = TurnHandle("turn_ids", "sess_ids")
        handle.completion_id, handle.created = "chatcmpl-fixed", 1
        for text in ("a", "multi\nline", "c"):
            handle.publish(TurnText(text))
        handle.publish(_finished())
        handle.finished_at = 1.0
        renderer = CompletionRenderer("m", include_usage=True)
        renderer.adopt(handle)
        frames = ChatFrames(renderer, handle, resume=resume)
        stream = turn_stream(handle, frames, 10, after=frames.after)
        return b"".join([w async for w in stream])

    return asyncio.run(run())


def test_each_frame_is_what_a_frame_with_its_id_encodes() -> None:
    for n, frame in enumerate(_frames(_whole(None))):
        id_line, _, rest = frame.partition(b"\r\n")
        data = rest.removeprefix(b"data: ").removesuffix(b"\r\n\r\n").decode()
        assert "\n" not in data and "\r" not in data, n  # chat frames are single-line
        assert frame == ServerSentEvent(data=data, id=id_line[4:].decode()).encode(), n


def test_a_resume_from_each_id_is_the_rest_of_the_stream() -> None:
    frames = _frames(_whole(None))
    ids = [frame.partition(b"\r\n")[0][4:].decode() for frame in frames]
    assert ids == ["0", "1", "2", "3", "4.1", "4.2", "4.3"]
    for at, last in enumerate(ids):
        seq, _, part = last.partition(".")
        resumed = _whole(EventPosition(int(seq), int(part or 0)))
        assert resumed == b"".join(frames[at + 1 :]), last
