"""Tables owned by the stateful tools: memory notes per API principal and end user, a todo
list per session.

Each holds one small JSON document per key rather than one row per item: the documents are
capped at a few kilobytes, and a single row lets every change be one locked
read-modify-write, so a cap check can never race a concurrent write by the same principal.
"""

from __future__ import annotations

import time

from sqlmodel import Field, SQLModel


def _now() -> float:
    return time.time()


class MemoryRow(SQLModel, table=True):
    __tablename__ = "memory"

    owner: str = Field(primary_key=True)
    """Fingerprint of the API key the notes belong to (the same value as session.owner)."""
    end_user: str = Field(default="", primary_key=True, sa_column_kwargs={"server_default": ""})
    """The key's end user they belong to ("" for none): one end user never reads another's."""
    notes: str = "[]"
    """JSON list of note strings, in the order they were added."""
    updated_at: float = Field(default_factory=_now)


class TodoListRow(SQLModel, table=True):
    __tablename__ = "todo_list"

    session_id: str = Field(primary_key=True, foreign_key="session.id")
    items: str = "[]"
    """JSON list of {id, text, status} objects, in list order."""
    next_id: int = 1
    """Never reused, so an id the model remembers cannot silently point at a newer item."""
    updated_at: float = Field(default_factory=_now)
