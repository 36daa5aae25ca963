"""AnthropicProvider against an upstream nobody listens on (the simulator cases are in
tests/e2e/test_provider_anthropic.py)."""

from __future__ import annotations

from typing import Any

from app.providers.anthropic import AnthropicProvider
from app.providers.base import (
    ModelRequest,
    SystemBlock,
    UserMessage,
)
from tests.support.provider_stream import stream_error

KEY = "sim-key-anthropic-0123456789"


def _request(*messages: Any, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-sim",
        system=fields.pop("system", (SystemBlock("Be brief."),)),
        messages=messages or (UserMessage("hello"),),
        **fields,
    )


async def test_unreachable_upstream_is_a_connection_error() -> None:
    adapter = AnthropicProvider("http://127.0.0.1:9", KEY, timeout=5)
    try:
        error = await stream_error(adapter, _request())
    finally:
        await adapter.aclose()
    assert error.kind == "connection" and error.retryable
