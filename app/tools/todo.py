"""todo: a per-session task list the model keeps for itself.

Stored with the session, so it survives restarts and compaction: after a long history is
summarised away the list is still the model's plan. Every action answers with the whole
list, so the model never has to guess the state it just changed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from app.db.tool_store import TodoItem, TodoState, ToolStateError, todo_state, update_todo
from app.tools.memory import MEMORY
from app.tools.recall import RECALL
from app.tools.registry import Tool, ToolContext, ToolError
from app.tools.session_search import SESSION_SEARCH, require_store

STATUSES = ("pending", "in_progress", "done")
ACTIONS = ("list", "add", "update", "remove", "clear")
MAX_ITEMS = 100
MAX_ITEM_CHARS = 500
_MARK = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]"}


def render(state: TodoState) -> str:
    if not state.items:
        return "Todo list is empty."
    done = sum(1 for i in state.items if i.status == "done")
    lines = [f"Todo ({done}/{len(state.items)} done):"]
    lines += [f"{_MARK.get(i.status, '[?]')} {i.id}. {i.text}" for i in state.items]
    return "\n".join(lines)


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{where} needs a non-empty text")
    text = " ".join(value.split())
    if len(text) > MAX_ITEM_CHARS:
        raise ToolError(f"{where}: text is longer than {MAX_ITEM_CHARS} characters")
    return text


def _status(value: object, where: str) -> str:
    if value not in STATUSES:
        raise ToolError(f"{where}: status must be one of: {', '.join(STATUSES)}")
    assert isinstance(value, str)
    return value


def _item_id(value: object, where: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        value = int(value.strip().lstrip("#"))  # models send "3" and "#3" as often as 3
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"{where} needs an integer id")
    return value


def _new_items(args: dict[str, Any]) -> list[tuple[str, str]]:
    raw = args.get("items")
    if raw is None:
        raw = [{"text": args.get("text"), "status": args.get("status", "pending")}]
    if not isinstance(raw, list) or not raw:
        raise ToolError("add needs items (a list) or text")
    entries: list[tuple[str, str]] = []
    for n, entry in enumerate(raw, start=1):
        where = f"add item {n}"
        if isinstance(entry, str):
            entries.append((_text(entry, where), "pending"))
        elif isinstance(entry, dict):
            status = entry.get("status") or "pending"
            entries.append((_text(entry.get("text"), where), _status(status, where)))
        else:
            raise ToolError(f"{where} must be a string or an object with text")
    return entries


def _updates(args: dict[str, Any]) -> list[dict[str, Any]]:
    raw = args.get("items")
    if raw is None:
        raw = [{"id": args.get("id"), "status": args.get("status"), "text": args.get("text")}]
    if not isinstance(raw, list) or not raw:
        raise ToolError("update needs id (with status and/or text) or items")
    updates: list[dict[str, Any]] = []
    for n, entry in enumerate(raw, start=1):
        where = f"update item {n}"
        if not isinstance(entry, dict):
            raise ToolError(f"{where} must be an object with id, status and/or text")
        change: dict[str, Any] = {"id": _item_id(entry.get("id"), where)}
        if entry.get("status") is not None:
            change["status"] = _status(entry["status"], where)
        if entry.get("text") is not None:
            change["text"] = _text(entry["text"], where)
        if len(change) == 1:
            raise ToolError(f"{where} changes nothing: give status and/or text")
        updates.append(change)
    return updates


def _remove_ids(args: dict[str, Any]) -> set[int]:
    raw = args.get("items")
    if raw is None:
        raw = [args.get("id")]
    if not isinstance(raw, list) or not raw:
        raise ToolError("remove needs id or items (a list of ids)")
    ids: set[int] = set()
    for entry in raw:
        value = entry.get("id") if isinstance(entry, dict) else entry
        ids.add(_item_id(value, "remove"))
    return ids


def _known(state: TodoState, ids: set[int]) -> None:
    missing = sorted(ids - {i.id for i in state.items})
    if missing:
        listed = ", ".join(str(i) for i in missing)
        raise ToolError(f"no todo item with id {listed}\n{render(state)}")


def _change_for(action: str, args: dict[str, Any]) -> Callable[[TodoState], TodoState]:
    # Arguments are validated before the transaction opens; only the id checks need the list.
    if action == "add":
        entries = _new_items(args)

        def add(state: TodoState) -> TodoState:
            if len(state.items) + len(entries) > MAX_ITEMS:
                raise ToolError(f"the list holds at most {MAX_ITEMS} items; remove some first")
            new = [
                TodoItem(id=state.next_id + n, text=text, status=status)
                for n, (text, status) in enumerate(entries)
            ]
            return TodoState(items=(*state.items, *new), next_id=state.next_id + len(new))

        return add
    if action == "update":
        updates = _updates(args)

        def update(state: TodoState) -> TodoState:
            _known(state, {u["id"] for u in updates})
            items = list(state.items)
            for u in updates:
                for n, item in enumerate(items):
                    if item.id == u["id"]:
                        fields = {k: v for k, v in u.items() if k != "id"}
                        items[n] = dataclasses.replace(item, **fields)
            return TodoState(items=tuple(items), next_id=state.next_id)

        return update
    if action == "remove":
        ids = _remove_ids(args)

        def remove(state: TodoState) -> TodoState:
            _known(state, ids)
            kept = tuple(i for i in state.items if i.id not in ids)
            return TodoState(items=kept, next_id=state.next_id)

        return remove

    def clear(state: TodoState) -> TodoState:
        # next_id is kept: an id the model still remembers must not name a new item.
        return TodoState(items=(), next_id=state.next_id)

    return clear


def _todo(args: dict[str, Any], ctx: ToolContext) -> str:
    store = require_store(ctx, "todo")
    action = args.get("action", "list")
    if action not in ACTIONS:
        raise ToolError(f"action must be one of: {', '.join(ACTIONS)}")
    if action == "list":
        return render(todo_state(store, session_id=ctx.session_id))
    try:
        state = update_todo(store, session_id=ctx.session_id, change=_change_for(action, args))
    except ToolStateError as exc:
        raise ToolError(str(exc)) from exc
    return render(state)


async def todo(args: dict[str, Any], ctx: ToolContext) -> str:
    return await asyncio.to_thread(_todo, args, ctx)


TODO = Tool(
    name="todo",
    description=(
        "Your task list for this session: plan multi-step work, mark progress, and check "
        "what is left. Every call returns the whole list. add takes items (strings or "
        "{text, status}) or text; update takes id with status and/or text (or items of "
        "{id, status?, text?}); remove takes id (or items of ids); clear empties the list."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "items": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"type": "string"},
                        {"type": "integer"},
                        {
                            "type": "object",
                            "properties": {
                                "id": {"type": "integer"},
                                "text": {"type": "string"},
                                "status": {"type": "string", "enum": list(STATUSES)},
                            },
                            "additionalProperties": False,
                        },
                    ]
                },
            },
            "id": {"type": "integer"},
            "status": {"type": "string", "enum": list(STATUSES)},
            "text": {"type": "string"},
        },
        "required": ["action"],
        "additionalProperties": False,
    },
    handler=todo,
    in_unit=_todo,
    read_only=False,
    toolset="core",
)


def state_tools() -> list[Tool]:
    """session_search and todo (toolset "core") and memory (toolset "memory")."""
    return [SESSION_SEARCH, MEMORY, TODO, RECALL]
