"""Every chat-completions request field has a fate: honoured, forwarded, refused or ignored.

Ignoring a field silently is how structured output, tool loops and logprobs broke in real
clients: the answer looked fine and was wrong. So a field we cannot honour is refused with
a 400 naming it when ignoring it would make the answer wrong, and a pure hint we drop is
named in the `X-Courier-Ignored` response header. docs/clients.md's request-field table lists
the same fates.
"""

from __future__ import annotations

from app.api.chat.wire import ChatCompletionRequest
from app.api.http.errors import ApiError
from app.providers.base import SAMPLING_FIELDS

REFUSED_LEGACY = ("functions", "function_call")


def refuse_unsupported(request: ChatCompletionRequest) -> None:
    """Refuse what we cannot honour, instead of silently doing something else."""
    if request.n is not None and request.n > 1:
        raise ApiError(400, "n > 1 is not supported; send one request per choice", param="n")
    if request.logprobs:
        raise ApiError(
            400,
            "logprobs are not returned by this endpoint",
            param="logprobs",
            code="unsupported_parameter",
        )
    if request.top_logprobs:
        raise ApiError(
            400,
            "top_logprobs are not returned by this endpoint",
            param="top_logprobs",
            code="unsupported_parameter",
        )
    if request.audio is not None or "audio" in (request.modalities or []):
        raise ApiError(
            400,
            "audio output is not supported; ask for text",
            param="modalities",
            code="unsupported_parameter",
        )
    extra = request.model_extra or {}
    for name in REFUSED_LEGACY:
        if name in extra:
            raise ApiError(
                400,
                f"the legacy '{name}' parameter is not supported; use 'tools'",
                param=name,
                code="unsupported_parameter",
            )
    for i, message in enumerate(request.messages):
        if message.role == "function":
            raise ApiError(
                400, "the legacy 'function' role is not supported", param=f"messages[{i}].role"
            )
        if (part := message.unsupported_part()) is not None:
            raise ApiError(
                400,
                f"content parts of type '{part}' are not supported (text and image_url are)",
                param=f"messages[{i}].content",
                code="unsupported_content",
            )
        if message.role == "tool" and not message.tool_call_id:
            raise ApiError(
                400,
                "a tool message needs the tool_call_id it answers",
                param=f"messages[{i}].tool_call_id",
            )


def ignored_fields(request: ChatCompletionRequest, *, passthrough: frozenset[str]) -> list[str]:
    """Fields the request set that neither Courier nor this upstream wire uses."""
    sent = request.model_fields_set
    dropped = [name for name in SAMPLING_FIELDS if name in sent and name not in passthrough]
    if "parallel_tool_calls" in sent and not request.tools:
        dropped.append("parallel_tool_calls")
    return sorted({*dropped, *request.unknown_fields()})
