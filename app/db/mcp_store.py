"""MCP in the database: each configured server's last listing, kept across restarts, and
the ledger of MCP calls (`mcp_call`), which the turns route sums per turn.

Without it, a restart starts every server's toolbox empty until the server answers: a
session that opens meanwhile gets no MCP tools, then gets them back at its next turn, two
cache breaks for nothing; a server down at boot takes its tools away until it returns.
With it, the hub offers the stored listing at once (app/tools/mcp/hub.py), and a live
listing with the same digest changes nothing. A listing is keyed by the server's name and
the digest of its configuration (command, args, URL; never env or header values): a
changed command or URL makes the stored listing someone else's, and it is not used.

A call's row is written in the unit that stores its result (app/agent/tool_step.py): the
ledger and the log cannot disagree about whether a call ran. It holds names, times and the
outcome, never arguments or results; like the usage ledger it outlives a purged session.

The tables are on SQLModel's metadata, created by the engine like every other table (no
migration tool yet); the SQL is plain SQL both SQLite and PostgreSQL accept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Index, bindparam, text
from sqlmodel import Field, SQLModel

from app.db.models import BIG

if TYPE_CHECKING:  # the engine imports this module for its table, and the store the engine
    from app.db.store import Store


def _now() -> float:
    return time.time()


class McpListingRow(SQLModel, table=True):
    __tablename__ = "mcp_listing"

    server: str = Field(primary_key=True)
    config_digest: str
    tools: str
    """The server's `tools/list` answer, every page, as JSON (the MCP wire's own shape)."""
    listed_at: float = Field(default_factory=_now)


_UPSERT = text(
    "INSERT INTO mcp_listing (server, config_digest, tools, listed_at) "
    "VALUES (:server, :digest, :tools, :now) "
    "ON CONFLICT (server) DO UPDATE SET config_digest = excluded.config_digest, "
    "tools = excluded.tools, listed_at = excluded.listed_at"
)
_ALL = text("SELECT server, config_digest, tools FROM mcp_listing")


def save_listing(store: Store, *, server: str, digest: str, tools: str) -> None:
    with store.begin() as conn:
        conn.execute(
            _UPSERT, {"server": server, "digest": digest, "tools": tools, "now": time.time()}
        )


def stored_listings(store: Store) -> dict[str, tuple[str, str]]:
    """server -> (config digest, tools JSON)."""
    with store.reader() as conn:
        return {row[0]: (row[1], row[2]) for row in conn.execute(_ALL)}


class McpCallRow(SQLModel, table=True):
    __tablename__ = "mcp_call"
    __table_args__ = (Index("ix_mcp_call_session_turn", "session_id", "turn_id"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG)
    session_id: str
    turn_id: str
    call_id: str
    owner: str
    end_user: str = ""
    server: str
    """The configured server's name, or a Responses request's server_label."""
    tool: str
    """The server's own name for the tool."""
    remote: bool = False
    """A server the Responses request declared, not one of COURIER_MCP_CONFIG."""
    started_at: float
    duration_ms: float
    outcome: str
    """ok, tool_error, timeout, unavailable, closed, protocol, or not_run (answered
    before it reached the server: refused by the approval ladder, bad arguments)."""
    result_chars: int = 0


@dataclass(frozen=True, slots=True)
class McpCall:
    session_id: str
    turn_id: str
    call_id: str
    owner: str
    end_user: str
    server: str
    tool: str
    remote: bool
    started_at: float
    duration_ms: float
    outcome: str
    result_chars: int


_RECORD = text(
    "INSERT INTO mcp_call (session_id, turn_id, call_id, owner, end_user, server, tool, "
    "remote, started_at, duration_ms, outcome, result_chars) VALUES (:session_id, "
    ":turn_id, :call_id, :owner, :end_user, :server, :tool, :remote, :started_at, "
    ":duration_ms, :outcome, :result_chars)"
)
_TOTALS = text(
    "SELECT turn_id, server, COUNT(*), SUM(duration_ms), "
    "SUM(CASE WHEN outcome = 'ok' THEN 0 ELSE 1 END) FROM mcp_call "
    "WHERE session_id = :session_id AND turn_id IN :turn_ids GROUP BY turn_id, server"
).bindparams(bindparam("turn_ids", expanding=True))


def record_call(store: Store, call: McpCall) -> None:
    """One call's row, in the caller's unit (the one storing the call's result)."""
    with store.begin() as conn:
        conn.execute(_RECORD, {f: getattr(call, f) for f in call.__dataclass_fields__})


def turn_totals(
    store: Store, *, session_id: str, turn_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Per turn: its MCP calls, their time and, per server, calls, time and errors (any
    outcome but ok). One grouped query for a page of turns."""
    if not turn_ids:
        return {}
    totals: dict[str, dict[str, Any]] = {}
    with store.reader() as conn:
        rows = conn.execute(_TOTALS, {"session_id": session_id, "turn_ids": list(turn_ids)})
        for turn_id, server, calls, time_ms, errors in rows:
            turn = totals.setdefault(turn_id, {"calls": 0, "time_ms": 0.0, "servers": {}})
            turn["calls"] += calls
            turn["time_ms"] = round(turn["time_ms"] + time_ms, 3)
            turn["servers"][server] = {
                "calls": calls,
                "time_ms": round(time_ms, 3),
                "errors": errors,
            }
    return totals
