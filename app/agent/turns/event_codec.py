"""Turn events to JSON and back, exactly: a replay after a restart must render the very
body the first response had (same text, usage and cost), so nothing may be rounded or
dropped on the way through the database."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, assert_never

from app.agent.events import (
    ApprovalRequested,
    ApprovalResolved,
    ClientToolCalls,
    RemoteMcpApproval,
    RemoteMcpCall,
    RemoteMcpResult,
    ToolFinished,
    ToolStarted,
    TurnError,
    TurnEvent,
    TurnFinished,
    TurnReasoning,
    TurnText,
)
from app.providers.base import ToolCall
from app.providers.pricing import Cost
from app.providers.usage import Usage

_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def encode(event: TurnEvent) -> dict[str, Any]:
    match event:
        case TurnText() | TurnReasoning():
            return {"kind": event.kind, "text": event.text}
        case ToolStarted():
            started = {"kind": event.kind, "call_id": event.call_id, "name": event.name}
            return started | ({"source": event.source} if event.source else {})
        case ToolFinished():
            finished = {
                "kind": event.kind,
                "call_id": event.call_id,
                "name": event.name,
                "is_error": event.is_error,
                "duration_ms": event.duration_ms,
            }
            return finished | ({"source": event.source} if event.source else {})
        case ApprovalRequested():
            return {
                "kind": event.kind,
                "approval_id": event.approval_id,
                "call_id": event.call_id,
                "name": event.name,
                "summary": event.summary,
                "expires_at": event.expires_at,
                "grantable": event.grantable,
            }
        case ApprovalResolved():
            return {
                "kind": event.kind,
                "approval_id": event.approval_id,
                "call_id": event.call_id,
                "status": event.status,
            }
        case ClientToolCalls():
            calls = [[c.id, c.name, c.arguments] for c in event.calls]
            return {"kind": event.kind, "calls": calls}
        case TurnFinished():
            return {
                "kind": event.kind,
                "exit_reason": event.exit_reason,
                "finish_reason": event.finish_reason,
                "usage": {
                    **{k: getattr(event.usage, k) for k in _USAGE},
                    "reasoning_tokens": event.usage.reasoning_tokens,
                },
                "cost": {
                    "amount": str(event.cost.amount) if event.cost.amount is not None else None,
                    "status": event.cost.status,
                    "source": event.cost.source,
                    "notes": list(event.cost.notes),
                },
                "upstream_calls": event.upstream_calls,
                "iterations": event.iterations,
                "error": _error_out(event.error),
                "tools_ran": event.tools_ran,
                "routes": list(event.routes),
            }
        case RemoteMcpCall() | RemoteMcpResult() | RemoteMcpApproval():
            return {"kind": event.kind, **_fields(event)}
        case _:
            assert_never(event)


def _fields(event: RemoteMcpCall | RemoteMcpResult | RemoteMcpApproval) -> dict[str, Any]:
    return {k: getattr(event, k) for k in event.__dataclass_fields__ if k != "kind"}


_REMOTE: dict[str, type[RemoteMcpCall | RemoteMcpResult | RemoteMcpApproval]] = {
    "remote_mcp_call": RemoteMcpCall,
    "remote_mcp_result": RemoteMcpResult,
    "remote_mcp_approval": RemoteMcpApproval,
}


def _error_out(error: TurnError | None) -> dict[str, Any] | None:
    if error is None:
        return None
    return {
        "message": error.message,
        "type": error.type,
        "code": error.code,
        "retryable": error.retryable,
        "retry_after": error.retry_after,
    }


def decode(raw: dict[str, Any]) -> TurnEvent:
    kind = raw["kind"]
    if kind == "text":
        return TurnText(raw["text"])
    if kind == "reasoning":
        return TurnReasoning(raw["text"])
    if kind == "tool_started":
        return ToolStarted(raw["call_id"], raw["name"], source=raw.get("source", ""))
    if kind == "tool_finished":
        return ToolFinished(
            raw["call_id"],
            raw["name"],
            raw["is_error"],
            raw["duration_ms"],
            source=raw.get("source", ""),
        )
    if kind == "approval_requested":
        fields = {k: v for k, v in raw.items() if k != "kind"}
        return ApprovalRequested(**fields)
    if kind == "approval_resolved":
        return ApprovalResolved(raw["approval_id"], raw["call_id"], raw["status"])
    if kind == "client_tool_calls":
        return ClientToolCalls(tuple(ToolCall(*c) for c in raw["calls"]))
    if kind == "finished":
        cost = raw["cost"]
        error = raw["error"]
        return TurnFinished(
            exit_reason=raw["exit_reason"],
            finish_reason=raw["finish_reason"],
            usage=Usage(**raw["usage"]),
            cost=Cost(
                amount=Decimal(cost["amount"]) if cost["amount"] is not None else None,
                status=cost["status"],
                source=cost["source"],
                notes=tuple(cost["notes"]),
            ),
            upstream_calls=raw["upstream_calls"],
            iterations=raw["iterations"],
            error=_error_in(error),
            tools_ran=raw["tools_ran"],
            routes=tuple(raw["routes"]),
        )
    if (remote := _REMOTE.get(kind)) is not None:
        return remote(**{k: v for k, v in raw.items() if k != "kind"})
    raise ValueError(f"unknown turn event kind {kind!r}")


def _error_in(raw: dict[str, Any] | None) -> TurnError | None:
    if raw is None:
        return None
    # Records written before the status moved to the HTTP layer still carry one.
    return TurnError(**{k: v for k, v in raw.items() if k != "status"})
