"""The Anthropic adapter's former path, kept as the reference its lean wire is held to.

Until issue 10 the adapter called the SDK's typed `messages.create(stream=True)`: the SDK
encoded the body with the stdlib encoder and built a pydantic model per stream event,
which the adapter dumped back to a dict for `MessagesStreamState`. The tests compare the
bytes the upstream receives and the events folded on both paths; benchmarks/anthropic_wire.py
measures what the lean path saves against this one in the same run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic

from app.providers.anthropic import (
    AnthropicProvider,
    MessagesStreamState,
    build_messages_body,
    map_sdk_error,
)
from app.providers.base import ModelRequest, ProviderEvent

TYPED_PARAMS = ("model", "max_tokens", "messages", "system", "tools", "stop_sequences")


async def sdk_typed_stream(
    client: anthropic.AsyncAnthropic, request: ModelRequest, *, default_max_tokens: int = 8192
) -> AsyncIterator[ProviderEvent]:
    """The former `AnthropicProvider.stream`, without its error mapping."""
    body = build_messages_body(request, default_max_tokens=default_max_tokens)
    extra = {key: value for key, value in body.items() if key not in TYPED_PARAMS}
    events = await client.messages.create(
        model=body["model"],
        max_tokens=body["max_tokens"],
        messages=body["messages"],
        system=body.get("system", anthropic.omit),
        tools=body.get("tools", anthropic.omit),
        stop_sequences=body.get("stop_sequences", anthropic.omit),
        extra_body=extra or None,
        stream=True,
    )
    state = MessagesStreamState()
    try:
        async for event in events:
            for out in state.fold(event.model_dump(mode="json", exclude_none=True)):
                yield out
    finally:
        await events.close()
    for out in state.finish():
        yield out


async def former_provider_stream(
    self: AnthropicProvider, request: ModelRequest
) -> AsyncIterator[ProviderEvent]:
    """`AnthropicProvider.stream` as it was, for a server patched to run it (benchmarks);
    stream-time errors are mapped only as far as the SDK's typed errors go."""
    try:
        async for event in sdk_typed_stream(
            self._client, request, default_max_tokens=self._default_max_tokens
        ):
            yield event
    except anthropic.AnthropicError as exc:
        raise map_sdk_error(exc, secret=self._api_key) from None
