"""memory: a few small notes per API principal and end user that carry over into later
sessions (one end user of a shared key never reads or writes another's).

The notes reach the model through `memory_snapshot`, taken once when a session starts and
placed in the system prompt's volatile tier. Writes persist immediately but never rewrite
the running session's prompt (that would break the byte-stable cache prefix): they show up
in the next session. The tool's replies say so, so the model does not expect otherwise.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.db.store import Store
from app.db.tool_store import memory_notes, update_memory
from app.tools.registry import Tool, ToolContext, ToolError
from app.tools.session_search import require_owner, require_store

MEMORY_CHAR_CAP = 2_200
"""Total characters across one end user's notes: the snapshot rides in every prompt."""
_OPEN = "<memory>"
_CLOSE = "</memory>"
ACTIONS = ("add", "replace", "remove", "list")


def memory_snapshot(store: Store, *, owner: str, end_user: str) -> str:
    """One end user's notes under the key ("" for none) as a frozen text block for the
    system prompt, or "" when none.

    Call it once at session start and keep the result with the session: it is a snapshot,
    so notes written during the session appear in the NEXT session's block and never
    rewrite the current prompt. The same notes always give the same bytes.
    """
    notes = memory_notes(store, owner=owner, end_user=end_user) if owner else []
    if not notes:
        return ""
    body = "\n".join("- " + note.replace("\n", "\n  ") for note in notes)
    return (
        f"{_OPEN}\n"
        "Notes you saved in earlier sessions with the memory tool. They were frozen when "
        "this session started; changes you make now apply from the next session.\n"
        f"{body}\n{_CLOSE}"
    )


def _used(notes: list[str]) -> int:
    return sum(len(n) for n in notes)


def _text_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"memory {args.get('action')} needs a non-empty {name}")
    if "\x00" in value:
        raise ToolError(f"{name} contains a NUL byte")
    lowered = value.lower()
    # The snapshot is delimited by these tags; a note carrying one could end the block early.
    if _OPEN in lowered or _CLOSE in lowered:
        raise ToolError(f"{name} may not contain {_OPEN} or {_CLOSE}")
    return value.strip()


def _check_cap(before: list[str], after: list[str]) -> None:
    used = _used(after)
    if used > MEMORY_CHAR_CAP:
        free = MEMORY_CHAR_CAP - _used(before)
        need = used - _used(before)
        raise ToolError(
            f"memory is full: this change needs {need} more characters but only {free} of "
            f"{MEMORY_CHAR_CAP} are free. Remove or shorten notes (action replace/remove), "
            "or save something shorter."
        )


def _one_match(notes: list[str], old_text: str) -> int:
    matches = [i for i, note in enumerate(notes) if old_text in note]
    if not matches:
        raise ToolError(f"no note contains {old_text!r}; use action list to see the notes")
    if len({notes[i] for i in matches}) > 1:
        raise ToolError(
            f"{old_text!r} occurs in {len(matches)} notes; quote more of the one you mean"
        )
    return matches[0]


def render(notes: list[str], *, status: str) -> str:
    usage = f"{_used(notes)}/{MEMORY_CHAR_CAP} characters"
    if not notes:
        return f"{status}\nMemory is empty ({usage})."
    listing = "\n".join(f"{n}. {note}" for n, note in enumerate(notes, start=1))
    return f"{status}\nMemory ({len(notes)} notes, {usage}):\n{listing}"


def _memory(args: dict[str, Any], ctx: ToolContext) -> str:
    store = require_store(ctx, "memory")
    owner = require_owner(ctx, "memory")
    action = args.get("action")
    if action not in ACTIONS:
        raise ToolError(f"action must be one of: {', '.join(ACTIONS)}")
    scope = {"owner": owner, "end_user": ctx.end_user}
    if action == "list":
        return render(memory_notes(store, **scope), status="Saved notes.")
    status = ""

    def change(notes: list[str]) -> list[str]:
        nonlocal status
        if action == "add":
            text = _text_arg(args, "text")
            if text in notes:
                status = "Already saved; nothing changed."
                return notes
            after = [*notes, text]
            status = "Saved; it will be in your memory from the next session."
        elif action == "replace":
            old = _text_arg(args, "old_text")
            text = _text_arg(args, "text")
            index = _one_match(notes, old)
            after = [*notes[:index], text, *notes[index + 1 :]]
            status = "Replaced; the change applies from the next session."
        else:
            # Models often name the note to remove with `text`; accept either.
            name = "old_text" if args.get("old_text") else "text"
            index = _one_match(notes, _text_arg(args, name))
            after = [*notes[:index], *notes[index + 1 :]]
            status = "Removed; the change applies from the next session."
        _check_cap(notes, after)
        return after

    return render(update_memory(store, **scope, change=change), status=status)


async def memory(args: dict[str, Any], ctx: ToolContext) -> str:
    return await asyncio.to_thread(_memory, args, ctx)


MEMORY = Tool(
    name="memory",
    description=(
        f"Keep a few short notes (at most {MEMORY_CHAR_CAP} characters in total) that are "
        "shown to you at the start of every later session: durable facts and preferences "
        "worth remembering, not task progress. Notes you change now appear from the next "
        "session. replace and remove pick the note containing old_text."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "text": {"type": "string", "description": "The note to add, or the replacement."},
            "old_text": {
                "type": "string",
                "description": "A unique part of the note to replace or remove.",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    },
    handler=memory,
    in_unit=_memory,
    read_only=False,
    toolset="memory",
)
