"""The turn path's SQL: the statements a turn's two units run, compiled once and run on
the DBAPI cursor (app/db/raw.py), and the session row built from a read as the ORM's
loader builds one. SQLModel stays the schema: column lists come from its tables.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticUndefined
from sqlalchemy.orm import configure_mappers
from sqlmodel import SQLModel

from app.db.models import SessionRow, TurnRow
from app.db.raw import Hot, insert_sql

_SESSION = SQLModel.metadata.tables["session"]
_API_CALL = SQLModel.metadata.tables["api_call"]
_TURN = SQLModel.metadata.tables["turn"]

ACTIVE_ROWS = Hot(
    "SELECT id, role, content, api_content, tool_calls, tool_call_id, tool_name, is_error, "
    "turn_id, kind, images FROM message WHERE session_id = :sid AND active = TRUE ORDER BY id"
)
SESSION_COLUMNS = tuple(c.name for c in _SESSION.columns)
SESSION_FLAGS = tuple(c.name for c in _SESSION.columns if c.type.python_type is bool)
"""SQLite hands booleans back as 0/1; the DBAPI read converts them as Core would."""

MESSAGE_COLUMNS = (
    "session_id",
    "turn_id",
    "role",
    "content",
    "api_content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "is_error",
    "reasoning",
    "kind",
    "images",
    "active",
    "compacted",
    "created_at",
)
INSERT_MESSAGE = insert_sql("message", MESSAGE_COLUMNS)
INSERT_MESSAGE_ID = insert_sql("message", MESSAGE_COLUMNS, returning="id")
INSERT_SESSION = insert_sql("session", SESSION_COLUMNS)
INSERT_TURN = insert_sql("turn", [c.name for c in _TURN.columns])
INSERT_API_CALL = insert_sql("api_call", [c.name for c in _API_CALL.columns if c.name != "id"])
FENCE = Hot("UPDATE session SET updated_at = :now WHERE id = :sid AND lease = :lease")
_ALL_SESSION_COLUMNS = ", ".join(f'"{c}"' for c in SESSION_COLUMNS)
TAKE_LEASE = Hot(
    # `updated_at` as the fence would write it: taking the lease proves the fence for the
    # rest of the unit, so a continued session's opening needs no fence statement. The row
    # comes back with it: the store keeps it for the lease holder (app/db/leased_rows.py).
    "UPDATE session SET lease = :lease, lease_expires_at = :exp, updated_at = :now "
    "WHERE id = :sid AND (lease IS NULL OR lease_expires_at < :now) "
    f"RETURNING {_ALL_SESSION_COLUMNS}"
)
RENEW_LEASE = Hot("UPDATE session SET lease_expires_at = :exp WHERE id = :sid AND lease = :lease")
RELEASE_LEASE = Hot(
    "UPDATE session SET lease = NULL, lease_expires_at = NULL WHERE id = :sid AND lease = :lease"
)
RELEASE_MOVING_HEAD = Hot(
    # The head moves whoever holds the lease now, as a statement of its own did; only the
    # release is conditioned on it (the right side reads the row as it was).
    "UPDATE session SET lease = CASE WHEN lease = :lease THEN NULL ELSE lease END, "
    "lease_expires_at = CASE WHEN lease = :lease THEN NULL ELSE lease_expires_at END, "
    "transcript_head = :h, transcript_len = :n WHERE id = :sid"
)
FINISH_TURN = Hot(
    "UPDATE turn SET finished_at = :now, exit_reason = :reason, iterations = :iterations, "
    "error = :error WHERE id = :tid"
)
GET_SESSION = Hot(f"SELECT {_ALL_SESSION_COLUMNS} FROM session WHERE id = :sid")
ROLLUP_READ = Hot("SELECT cost_usd FROM session WHERE id = :sid")
ROLLUP = Hot(
    # Compare-and-set on the cost the caller expects (the lease holder's kept row, else
    # the unit's own read): the stored text is a Decimal, which SQLite would add as a
    # lossy float, and a wrong expectation then changes nothing instead of losing money.
    "UPDATE session SET input_tokens = input_tokens + :input, "
    "output_tokens = output_tokens + :output, "
    "cache_read_tokens = cache_read_tokens + :cache_read, "
    "cache_write_tokens = cache_write_tokens + :cache_write, "
    "reasoning_tokens = reasoning_tokens + :reasoning, "
    "upstream_calls = upstream_calls + 1, "
    "cost_unknown_calls = cost_unknown_calls + :unknown, "
    "cost_usd = :cost, "
    "pending_cache_break = CASE WHEN pending_cache_break = :brk THEN NULL "
    "ELSE pending_cache_break END "
    "WHERE id = :sid AND cost_usd = :old"
)
_updates: dict[tuple[tuple[str, ...], bool], Hot] = {}


def _defaults(model: type[SQLModel]) -> dict[str, Any]:
    """The model's plain field defaults (not its factories), for inserts naming every column."""
    return {
        name: field.default
        for name, field in model.model_fields.items()
        if field.default_factory is None and field.default is not PydanticUndefined
    }


SESSION_DEFAULTS = _defaults(SessionRow)
"""A new session row's column defaults, for the insert that names every column."""
TURN_DEFAULTS = _defaults(TurnRow)


_SESSION_ROWS = SessionRow._sa_class_manager  # type: ignore[attr-defined]
_MAPPERS_READY = False


def _configure_mappers() -> None:
    """The ORM sets up its attribute machinery on first use; a row made without its
    constructor would otherwise be the process's first use, and half-built (reading an
    attribute fails in a process that has not queried through the ORM yet)."""
    global _MAPPERS_READY
    configure_mappers()
    _MAPPERS_READY = True


def session_row(values: dict[str, Any]) -> SessionRow:
    """A SessionRow from a full set of stored values, as the ORM's loader makes one.

    `SessionRow(**values)` runs SQLModel's constructor (each field set through an
    instrumented attribute event): about 200 µs; a session is read two or three times per
    upstream call, on the event loop. This is about 10 µs, and the object behaves the same
    (attribute events, `model_dump`, equality)."""
    if not _MAPPERS_READY:
        _configure_mappers()
    row: SessionRow = _SESSION_ROWS.new_instance()
    row.__dict__.update(values)
    object.__setattr__(row, "__pydantic_fields_set__", set(values))
    object.__setattr__(row, "__pydantic_extra__", None)
    object.__setattr__(row, "__pydantic_private__", None)
    return row


def session_update(columns: tuple[str, ...], *, fenced: bool = False) -> Hot:
    """`UPDATE session SET <columns>`: one statement per column set, compiled once.

    `fenced`: the same update as the lease fence too (`FENCE`'s `updated_at` and lease
    condition in it), so a unit's first fenced write is one statement, not two."""
    found = _updates.get((columns, fenced))
    if found is None:
        if unknown := set(columns) - set(_SESSION.c.keys()):
            raise ValueError(f"not session columns: {sorted(unknown)}")
        sets = ", ".join(f'"{c}" = :v_{c}' for c in columns)
        if fenced and "updated_at" not in columns:
            sets += ", updated_at = :now"
        where = "id = :sid AND lease = :lease" if fenced else "id = :sid"
        found = _updates[columns, fenced] = Hot(f"UPDATE session SET {sets} WHERE {where}")
    return found
