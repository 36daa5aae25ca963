"""What each wire module provides, so the server handles both through one code path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from app.simulator.cache import PromptCache, PromptUsage
from app.simulator.config import SimulatorConfig
from app.simulator.output import Output
from app.simulator.request import SimError, SimRequest, Wire


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE event, with the output tokens it carries (used to pace the stream)."""

    data: bytes
    tokens: int = 0


def sse(data: str, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


class WireFormat(Protocol):
    name: Wire
    id_prefix: str
    """Prefix of generated tool call ids (`call` / `toolu`)."""

    def parse(self, body: Any) -> SimRequest: ...

    def error_body(self, error: SimError) -> dict[str, Any]: ...

    def error_frame(self, error: SimError) -> Frame: ...

    def overflow_error(self, tokens: int, window: int) -> SimError: ...

    def prompt_usage(
        self, cache: PromptCache, now: float, request: SimRequest, config: SimulatorConfig
    ) -> PromptUsage: ...

    def response_body(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> dict[str, Any]: ...

    def stream_frames(
        self, request: SimRequest, output: Output, usage: PromptUsage, seq: int
    ) -> list[Frame]: ...
