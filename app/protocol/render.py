"""Render turn results as OpenAI JSON bodies and SSE chunks."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ToolFinished,
    ToolStarted,
    TurnError,
    TurnFinished,
)
from app.agent.turns import TurnHandle
from app.protocol.openai import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    CompletionTokensDetails,
    CourierCost,
    CourierUsage,
    Delta,
    ErrorBody,
    ErrorResponse,
    PromptTokensDetails,
    ResponseMessage,
    UsageOut,
)


def usage_out(finished: TurnFinished) -> UsageOut:
    usage, cost = finished.usage, finished.cost
    return UsageOut(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=PromptTokensDetails(
            cached_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens
        ),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        cost=cost.amount_float,
        courier=CourierUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            upstream_calls=finished.upstream_calls,
            cost=CourierCost(
                amount_usd=str(cost.amount) if cost.amount is not None else None,
                status=cost.status,
                source=cost.source,
            ),
        ),
    )


def tool_event_payload(event: ToolStarted | ToolFinished) -> str:
    """Name, call id, duration and outcome; never the arguments, which may hold secrets."""
    body: dict[str, Any] = {"call_id": event.call_id, "name": event.name}
    if isinstance(event, ToolStarted):
        body["type"] = "tool.started"
    else:
        body |= {
            "type": "tool.finished",
            "ok": not event.is_error,
            "duration_ms": round(event.duration_ms, 1),
        }
    return json.dumps(body, separators=(",", ":"))


def approval_event_payload(event: ApprovalRequested | ApprovalResolved) -> str:
    """What an approver UI needs to act: the id to POST to, and what it would allow."""
    body: dict[str, Any] = {"approval_id": event.approval_id, "call_id": event.call_id}
    if isinstance(event, ApprovalRequested):
        body |= {
            "type": "approval.requested",
            "tool": event.name,
            "summary": event.summary,
            "expires_at": event.expires_at,
            "grantable": event.grantable,
        }
    else:
        body |= {"type": "approval.resolved", "status": event.status}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False)


def error_payload(error: TurnError) -> dict[str, Any]:
    body = ErrorBody(message=error.message, type=error.type, param=None, code=error.code)
    return ErrorResponse(error=body).model_dump(mode="json")


class CompletionRenderer:
    """One completion's identity: the same id, created and model on every chunk."""

    def __init__(self, model: str, *, include_usage: bool = False) -> None:
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def adopt(self, handle: TurnHandle) -> None:
        """Share one identity per turn: a reattached retry sees the same id and created."""
        if handle.completion_id:
            self.id, self.created = handle.completion_id, handle.created
        else:
            handle.completion_id, handle.created = self.id, self.created

    def completion(self, text: str, finished: TurnFinished) -> dict[str, Any]:
        body = ChatCompletion(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[
                Choice(
                    message=ResponseMessage(content=text or None),
                    finish_reason=finished.finish_reason,
                )
            ],
            usage=usage_out(finished),
        )
        return body.model_dump(mode="json")

    def _chunk(self, choices: list[ChunkChoice], usage: UsageOut | None = None) -> str:
        chunk = ChatCompletionChunk(
            id=self.id, created=self.created, model=self.model, choices=choices, usage=usage
        )
        data = chunk.model_dump(mode="json", exclude={"choices"})
        # A delta carries only what changed: a repeated `role` would be concatenated by
        # the SDK's accumulator into "assistantassistant".
        data["choices"] = [
            {
                "index": c.index,
                "delta": c.delta.model_dump(exclude_none=True),
                "finish_reason": c.finish_reason,
            }
            for c in choices
        ]
        if not self.include_usage:
            del data["usage"]
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)

    def role_chunk(self) -> str:
        return self._chunk([ChunkChoice(delta=Delta(role="assistant", content=""))])

    def text_chunk(self, text: str) -> str:
        return self._chunk([ChunkChoice(delta=Delta(content=text))])

    def finish_chunk(self, finished: TurnFinished) -> str:
        return self._chunk([ChunkChoice(delta=Delta(), finish_reason=finished.finish_reason)])

    def usage_chunk(self, finished: TurnFinished) -> str:
        return self._chunk([], usage=usage_out(finished))
