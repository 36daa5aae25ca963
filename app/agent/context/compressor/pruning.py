"""The deterministic prune: old tool output stubbed or deduplicated, long call arguments
shortened, without a model call. Every stub names the `recall` that restores the original.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.agent.context.compressor.sizes import row_text
from app.db.store import NewMessage, StoredMessage

PRUNE_RESULT_CHARS = 2_000
PRUNE_ARGUMENT_CHARS = 2_000


def row_text_new(message: NewMessage) -> str:
    text = message.api_content if message.api_content is not None else (message.content or "")
    if message.tool_calls:
        text += json.dumps(list(message.tool_calls))
    return text


def prune_rows(rows: Sequence[StoredMessage], protected: set[int]) -> dict[int, NewMessage]:
    """Replacements (by index) for old rows: deduped and stubbed tool output, shortened
    call arguments that stay valid JSON. Protected (recent) rows are never touched."""
    out: dict[int, NewMessage] = {}
    seen: dict[str, int] = {}
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        if row.id in protected:
            if row.role == "tool":
                seen.setdefault(row_text(row), row.id)
            continue
        if row.role == "tool" and row.kind != "pruned":
            text = row_text(row)
            if text in seen and len(text) > 200:
                stub = (
                    f"[identical to a later result of {row.tool_name}; "
                    f"recall(message_id={row.id}) restores it]"
                )
            elif len(text) > PRUNE_RESULT_CHARS:
                stub = (
                    f"[pruned {len(text):,} chars of {row.tool_name} output to save context; "
                    f"recall(message_id={row.id}) restores it]"
                )
            else:
                seen.setdefault(text, row.id)
                continue
            seen.setdefault(text, row.id)
            out[index] = row.as_new(api_content=stub, kind="pruned")
        elif row.role == "assistant" and row.tool_calls:
            calls = [_shorten_call(c) for c in row.tool_calls]
            if calls != list(row.tool_calls):
                out[index] = row.as_new(tool_calls=calls)
    return out


def _shorten_call(call: dict[str, str]) -> dict[str, str]:
    raw = call.get("arguments", "")
    if len(raw) <= PRUNE_ARGUMENT_CHARS:
        return call
    try:
        args = json.loads(raw)
    except ValueError:
        return call
    if not isinstance(args, dict):
        return call
    short = {
        k: (v[:200] + f"... [{len(v) - 200} chars pruned]")
        if isinstance(v, str) and len(v) > 400
        else v
        for k, v in args.items()
    }
    return {**call, "arguments": json.dumps(short, ensure_ascii=False)}
