"""Paced delivery of frames, and the abrupt connection drop used by `drop_after_events`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from starlette.responses import StreamingResponse
from starlette.types import Send

from app.simulator.config import SimulatorConfig
from app.simulator.wire import Frame

INCOMPLETE_RESPONSE_LOG = "ASGI callable returned without completing response."
"""What uvicorn logs when a drop fault leaves a body unfinished; the server filters it out."""


@dataclass(frozen=True, slots=True)
class Pacing:
    ttft: float
    """Seconds before the first token-bearing frame."""
    tokens_per_second: float

    @classmethod
    def from_config(cls, config: SimulatorConfig) -> Pacing:
        return cls(config.ttft_ms / 1000, config.tokens_per_second)

    def token_delay(self, tokens: int) -> float:
        return tokens / self.tokens_per_second if self.tokens_per_second > 0 else 0.0

    def total(self, tokens: int) -> float:
        """Wall time a non-streamed answer of `tokens` output tokens takes."""
        return self.ttft + self.token_delay(tokens)


class FrameStream(StreamingResponse):
    """Sends frames at the configured pace.

    With `drop_after`, it stops after that many frames and returns without the final empty
    body message; uvicorn then closes the socket mid-body, so the client sees a truncated
    chunked (or short Content-Length) response, not a clean end of stream.
    """

    def __init__(
        self,
        frames: Sequence[Frame],
        pacing: Pacing,
        *,
        drop_after: int | None = None,
        media_type: str = "text/event-stream",
        headers: Mapping[str, str] | None = None,
        on_disconnect: Callable[[], None] | None = None,
        stall: tuple[int, float] | None = None,
    ) -> None:
        super().__init__((), media_type=media_type, headers=headers)
        self.frames = frames
        self.pacing = pacing
        self.drop_after = drop_after
        self.stall = stall
        """(frames sent, seconds): go silent after that many frames, as a hung upstream."""
        self.on_disconnect = on_disconnect

    async def _pace(self, frame: Frame, first_token: bool) -> None:
        if frame.tokens <= 0:
            return
        delay = self.pacing.token_delay(frame.tokens) + (self.pacing.ttft if first_token else 0)
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream_response(self, send: Send) -> None:
        try:
            await self._send_frames(send)
        except (asyncio.CancelledError, OSError, RuntimeError):
            # Starlette cancels this on `http.disconnect` (or a send to a closed socket
            # fails): the client hung up mid-answer, which tests count.
            if self.on_disconnect is not None:
                self.on_disconnect()
            raise

    async def _send_frames(self, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send({**start, "headers": self.raw_headers})
        seen_tokens = False
        for sent, frame in enumerate(self.frames):
            if self.drop_after is not None and sent >= self.drop_after:
                return
            if self.stall is not None and sent == self.stall[0]:
                await asyncio.sleep(self.stall[1])
            await self._pace(frame, first_token=not seen_tokens)
            seen_tokens = seen_tokens or frame.tokens > 0
            await send({"type": "http.response.body", "body": frame.data, "more_body": True})
        if self.drop_after is None:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
