"""recall: read back one message of this session by id, live or archived.

Pruning and compaction replace old tool output with a stub naming the archived row;
this is how the model gets the full text back without re-running the tool.
"""

from __future__ import annotations

from typing import Any

from app.tools.registry import Tool, ToolContext, ToolError
from app.tools.session_search import require_store

MAX_RECALL_CHARS = 100_000


async def _recall(args: dict[str, Any], ctx: ToolContext) -> str:
    store = require_store(ctx, "recall")
    message_id = args.get("message_id")
    if not isinstance(message_id, int) or isinstance(message_id, bool) or message_id < 1:
        raise ToolError("message_id must be a positive integer")
    row = store.get_message(session_id=ctx.session_id, message_id=message_id)
    if row is None:
        raise ToolError(f"no message {message_id} in this session")
    text = row.content or ""
    label = f"message {message_id} ({row.role}{', ' + row.tool_name if row.tool_name else ''})"
    if len(text) > MAX_RECALL_CHARS:
        shown = text[:MAX_RECALL_CHARS]
        return f"{label}, first {MAX_RECALL_CHARS:,} of {len(text):,} chars:\n{shown}"
    return f"{label}:\n{text}"


RECALL = Tool(
    name="recall",
    description=(
        "Read back the full text of an earlier message of this session by its id, for "
        "output that was pruned or summarised away."
    ),
    parameters={
        "type": "object",
        "properties": {"message_id": {"type": "integer", "minimum": 1}},
        "required": ["message_id"],
        "additionalProperties": False,
    },
    handler=_recall,
)
