"""A turn's events as JSON for the replay stream: one object per event, numbered.

The chat stream speaks OpenAI chunks and cannot carry a sequence number without breaking
strict SDKs; this shape can, so a client that dropped reattaches with `after=N` and gets
exactly the events it missed. Each event is a frame with its sequence number as the SSE
`id` and its type as the event name (`ReplayFrames`, streamed by `app/api/http/sse.py`).
"""

from __future__ import annotations

import json
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
    TurnEvent,
    TurnFinished,
    TurnReasoning,
    TurnText,
)
from app.api.chat.render import (
    approval_event_payload,
    error_payload,
    tool_event_payload,
    usage_out,
)
from app.api.http.sse import ServerSentEvent


def event_payload(seq: int, turn_id: str, event: TurnEvent) -> dict[str, Any]:
    body: dict[str, Any] = {"seq": seq, "turn_id": turn_id}
    match event:
        case TurnText():
            body |= {"type": "text", "text": event.text}
        case TurnReasoning():
            body |= {"type": "reasoning", "text": event.text}
        case ToolStarted() | ToolFinished():
            body |= tool_event_payload(event)
        case ApprovalRequested() | ApprovalResolved():
            body |= approval_event_payload(event)
        case ClientToolCalls():
            calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in event.calls]
            body |= {"type": "client_tool_calls", "calls": calls}
        case TurnFinished():
            body |= {
                "type": "finished",
                "exit_reason": event.exit_reason,
                "finish_reason": event.finish_reason,
                "usage": usage_out(event).model_dump(),
                "error": error_payload(event.error)["error"] if event.error else None,
            }
        case RemoteMcpCall() | RemoteMcpApproval():
            body |= {
                "type": event.kind,
                "call_id": event.call_id,
                "server_label": event.server_label,
                "name": event.name,
            }
        case RemoteMcpResult():
            body |= {"type": event.kind, "call_id": event.call_id, "is_error": bool(event.error)}
        case _:
            assert_never(event)
    return body


class ReplayFrames:
    """A turn's events after `after` as numbered JSON frames (`app/api/http/sse.py`'s
    `TurnFrames`). Watching never stops the turn: this is not the turn's client."""

    head = b""
    head_waits = False

    def __init__(self, turn_id: str, after: int) -> None:
        self.turn_id = turn_id
        self.seq = after

    def frames(self, event: TurnEvent) -> bytes:
        self.seq += 1
        payload = event_payload(self.seq, self.turn_id, event)
        frame = ServerSentEvent(data=json.dumps(payload), id=str(self.seq), event=payload["type"])
        return frame.encode()

    async def last(self, event: TurnFinished) -> bytes:
        return self.frames(event)

    def left(self) -> None:
        pass
