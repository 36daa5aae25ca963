"""Typed turn events: what a running turn tells whoever is rendering it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.providers.base import ToolCall
from app.providers.pricing import Cost
from app.providers.usage import Usage

ExitReason = Literal[
    "completed",
    "budget_exhausted",
    "cancelled",
    "upstream_error",
    "persistence_failed",
    "lease_lost",
    "spend_limit",
    "internal_error",
    "invalid_output",
    "secret_in_request",
    "truncated",
    "empty_reply",
    "interrupted",
]


@dataclass(frozen=True, slots=True)
class TurnText:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class TurnReasoning:
    text: str
    kind: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolStarted:
    call_id: str
    name: str
    kind: Literal["tool_started"] = "tool_started"
    source: str = ""
    """Where the tool lives when not in Courier: `mcp:<server>` (the servers file) or
    `mcp-remote:<label>` (a Responses request's own server)."""


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    is_error: bool
    duration_ms: float = 0.0
    kind: Literal["tool_finished"] = "tool_finished"
    source: str = ""


@dataclass(frozen=True, slots=True)
class ApprovalRequested:
    """A tool call is parked until a human decides (`POST /v1/approvals/{id}`)."""

    approval_id: str
    call_id: str
    name: str
    summary: str
    """The command or path as the approver sees it, secrets redacted."""
    expires_at: float
    grantable: bool = True
    kind: Literal["approval_requested"] = "approval_requested"


@dataclass(frozen=True, slots=True)
class ApprovalResolved:
    approval_id: str
    call_id: str
    status: str
    """approved, denied, expired or cancelled."""
    kind: Literal["approval_resolved"] = "approval_resolved"


@dataclass(frozen=True, slots=True)
class ClientToolCalls:
    """Calls to tools the client declared: the turn ends and the client runs them."""

    calls: tuple[ToolCall, ...]
    kind: Literal["client_tool_calls"] = "client_tool_calls"


@dataclass(frozen=True, slots=True)
class RemoteMcpCall:
    """A call to a tool of a server the Responses request declared (its `mcp` tool)
    starts: the client sees it as an `mcp_call` item."""

    call_id: str
    server_label: str
    name: str
    """The server's own name for the tool, not the model's `mcp__...` one."""
    arguments: str
    approval_request_id: str | None = None
    kind: Literal["remote_mcp_call"] = "remote_mcp_call"


@dataclass(frozen=True, slots=True)
class RemoteMcpResult:
    call_id: str
    output: str | None
    """The server's text, unfenced (the model reads it fenced)."""
    error: str | None = None
    """The spec's `mcp_call.error` object, as JSON."""
    kind: Literal["remote_mcp_result"] = "remote_mcp_result"


@dataclass(frozen=True, slots=True)
class RemoteMcpApproval:
    """A remote call held for the client's `mcp_approval_response`: the turn ends with it."""

    call_id: str
    server_label: str
    name: str
    arguments: str
    kind: Literal["remote_mcp_approval"] = "remote_mcp_approval"


@dataclass(frozen=True, slots=True)
class TurnError:
    """Why a turn failed, in terms a client may see: never internals or upstream keys."""

    message: str
    type: str
    code: str
    retryable: bool = False
    """Whether the same request could succeed if sent again (a rate limit, an overload)."""
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class TurnFinished:
    exit_reason: ExitReason
    finish_reason: Literal["stop", "length", "content_filter", "tool_calls"]
    usage: Usage
    cost: Cost
    upstream_calls: int
    iterations: int = 0
    error: TurnError | None = None
    tools_ran: int = 0
    """Server-side tool calls this turn executed: side effects a blind retry would repeat."""
    routes: tuple[str, ...] = ()
    """The profiles the turn went through when it fell back (first is the session's)."""
    kind: Literal["finished"] = "finished"


TurnEvent = (
    TurnText
    | TurnReasoning
    | ToolStarted
    | ToolFinished
    | ApprovalRequested
    | ApprovalResolved
    | ClientToolCalls
    | TurnFinished
    | RemoteMcpCall
    | RemoteMcpResult
    | RemoteMcpApproval
)
