"""A chat request's parsed body validated into the wire model, a long history in slices.

pydantic validates a list in one call that holds the interpreter lock throughout: 10,000
messages held it for tens of milliseconds, and every other stream on the server stood
still meanwhile, even with the call on a thread. Validating the messages in slices lets
the loop run between them; the request is then validated around the messages already
made (pydantic takes model instances as they are). An error in a slice would name the
slice's index, so any failure is validated again whole, for the full path's exact error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import TypeAdapter, ValidationError

from app.api.chat.wire import ChatCompletionRequest, ChatMessageIn
from app.api.http.errors import validation_error

SLICE = 256
"""Messages validated per call (about a quarter of a millisecond here)."""
LONG_HISTORY = 64
"""Messages past which validating a request is worth a thread hop."""

_MESSAGES = TypeAdapter(list[ChatMessageIn])


def validate_request(data: dict[str, Any]) -> ChatCompletionRequest:
    """The request, or the 400 naming what is wrong."""
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc) from None


def _validate_sliced(data: dict[str, Any]) -> ChatCompletionRequest:
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) <= SLICE:
        return validate_request(data)
    made: list[ChatMessageIn] = []
    try:
        for start in range(0, len(messages), SLICE):
            made += _MESSAGES.validate_python(messages[start : start + SLICE])
    except ValidationError:
        return validate_request(data)  # raises, naming the client's own index
    return validate_request({**data, "messages": made})


async def validated(data: dict[str, Any]) -> ChatCompletionRequest:
    """`validate_request`, on a thread in slices when the history is long."""
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > LONG_HISTORY:
        return await asyncio.to_thread(_validate_sliced, data)
    return validate_request(data)
