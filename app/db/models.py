"""SQLModel tables. Messages are ordered by their autoincrement id, never by timestamp."""

from __future__ import annotations

import time

from sqlalchemy import BigInteger, Column, Float, Index, Integer, Table, Text
from sqlmodel import Field, SQLModel


def _now() -> float:
    return time.time()


BIG = BigInteger().with_variant(Integer(), "sqlite")
"""Row ids and token counters: 64-bit on PostgreSQL, where INTEGER is 32-bit and a long
session's summed cache reads pass 2^31. SQLite's INTEGER is 64-bit already, and an
`INTEGER PRIMARY KEY` must stay exactly that to remain the rowid (BIGINT would lose the
autoincrement)."""


class SessionRow(SQLModel, table=True):
    __tablename__ = "session"
    # Listing a key's sessions, or one end user's, newest first (the sessions API's query):
    # each index holds the list's whole order, id included, so a page is a walk of `limit`
    # entries from its cursor. Without the key-wide one, a key's first page sorted all its
    # sessions in a temporary B-tree (74 ms at 100,000 sessions).
    __table_args__ = (
        Index("ix_session_owner_started", "owner", "started_at", "id"),
        Index("ix_session_owner_end_user_started", "owner", "end_user", "started_at", "id"),
    )

    id: str = Field(primary_key=True)
    owner: str
    """Fingerprint of the API key that created the session; only it (or an admin) reads it."""
    end_user: str = Field(default="", sa_column_kwargs={"server_default": ""})
    """The app's end user the session was made for ("" for none; app/api/http/end_users.py).
    Fixed at creation: memory, search and spend of every turn in it are that end user's."""
    profile: str
    system_prompt: str
    """Built once when the session starts and reused verbatim, so its bytes never drift."""
    tool_snapshot: str = "[]"
    """The session's tool schemas, serialised once with a stable key order."""
    pending_cache_break: str | None = None
    """Why the next upstream request deliberately breaks the cached prefix, if it does."""
    client_tools: str = "[]"
    """The client-declared tool schemas of the last request, serialised like the snapshot;
    a changed set is a named cache break."""
    transcript_head: str | None = None
    """Rolling hash of the client-visible transcript so far (app/agent/opening/continuity.py)."""
    transcript_len: int = 0
    """How many client-visible messages the transcript index holds for this session."""
    client_instructions: str = "[]"
    """JSON list of the client's system/developer texts, kept so a compaction can rebuild
    the prompt from the same inputs."""
    # The compressor's durable state: a restart must not reset a breaker or a runway.
    anchor_rough: int | None = None
    anchor_billed: int | None = None
    """Calibration pair: our rough estimate of a prompt and what the provider billed for it."""
    prune_rearm_at: int | None = None
    """A prune may commit again only once the prompt has regrown to this many tokens."""
    verdict_pending: bool = False
    """Set by a compaction; the next response with usage judges whether it helped."""
    compaction_strikes: int = 0
    fallback_streak: int = 0
    summary_cooldown_until: float = 0.0
    compactions: int = 0
    last_call_at: float | None = None
    """Wall time of the last upstream call: a gap beyond the cache TTL means a cold prefix."""
    started_at: float = Field(default_factory=_now)
    updated_at: float = Field(default_factory=_now)
    lease: str | None = None
    """The turn currently allowed to append; every append checks it in its transaction."""
    lease_expires_at: float | None = None
    # Rolled-up usage; the per-call truth lives in api_call.
    input_tokens: int = Field(default=0, sa_type=BIG)
    output_tokens: int = Field(default=0, sa_type=BIG)
    cache_read_tokens: int = Field(default=0, sa_type=BIG)
    cache_write_tokens: int = Field(default=0, sa_type=BIG)
    reasoning_tokens: int = Field(default=0, sa_type=BIG)
    cost_usd: str = "0"
    cost_unknown_calls: int = 0
    upstream_calls: int = 0


class MessageRow(SQLModel, table=True):
    __tablename__ = "message"

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG)
    session_id: str = Field(foreign_key="session.id", index=True)
    turn_id: str | None = Field(default=None, index=True)
    role: str
    """user | assistant | tool | system (a client instruction from mid-conversation)."""
    content: str | None = None
    api_content: str | None = None
    """The exact text sent upstream when it differs from `content`; replay uses it verbatim."""
    tool_calls: str | None = None
    """JSON list of {id, name, arguments} for an assistant message that called tools."""
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    kind: str | None = None
    """`summary` for a compaction summary, `pruned` for a pruned copy; None otherwise."""
    reasoning: str | None = None
    """Display only: raw reasoning never re-enters the transcript."""
    images: str | None = None
    """JSON list of sha256 keys into `session_image`: an image is stored once per session."""
    active: bool = True
    compacted: bool = False
    created_at: float = Field(default_factory=_now)


class TurnRow(SQLModel, table=True):
    __tablename__ = "turn"

    id: str = Field(primary_key=True)
    session_id: str = Field(foreign_key="session.id", index=True)
    started_at: float = Field(default_factory=_now)
    finished_at: float | None = None
    exit_reason: str | None = None
    iterations: int = 0
    error: str | None = None


class ApiCallRow(SQLModel, table=True):
    __tablename__ = "api_call"
    # Spend per key, and per end user of a key (app/agent/cost/spend_caps.py).
    __table_args__ = (Index("ix_api_call_owner_end_user", "owner", "end_user"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BIG)
    session_id: str = Field(foreign_key="session.id", index=True)
    turn_id: str
    """Not indexed: nothing looks calls up by turn, and the index cost every upstream
    call's insert a B-tree page of its own (about 12 µs of the writer's CPU)."""
    owner: str
    end_user: str = Field(default="", sa_column_kwargs={"server_default": ""})
    """The session's end user, kept with the call so a relay's calls (kept in one ledger
    session per key) count against the right end user's cap too."""
    profile: str
    upstream_model: str
    input_tokens: int = Field(default=0, sa_type=BIG)
    output_tokens: int = Field(default=0, sa_type=BIG)
    cache_read_tokens: int = Field(default=0, sa_type=BIG)
    cache_write_tokens: int = Field(default=0, sa_type=BIG)
    reasoning_tokens: int = Field(default=0, sa_type=BIG)
    cost_usd: str | None = None
    cost_status: str = "unknown"
    cost_source: str = ""
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    outcome: str = "ok"
    """ok | error kind from the provider error taxonomy."""
    cache_break: str | None = None
    """Set when this request deliberately broke the cached prefix (compaction, tools)."""
    created_at: float = Field(default_factory=_now, index=True)


# Made by raw DDL before the migrations (app/db/migrations/): Core tables, so the baseline
# creates them on both backends with the same types (REAL is 4 bytes on PostgreSQL: epoch
# seconds would round to minutes).
IDEMPOTENCY_RECORD = Table(
    "idempotency_record",
    SQLModel.metadata,
    Column("owner", Text, primary_key=True),
    Column("key", Text, primary_key=True),
    Column("digest", Text, nullable=False),
    Column("turn_id", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("completion_id", Text, nullable=False, server_default=""),
    Column("created", BIG, nullable=False, server_default="0"),
    Column("events", Text),
    Column("created_at", Float, nullable=False),
)
"""Durable idempotency (app/db/idempotency_store.py)."""
UPSTREAM_KEY_STATE = Table(
    "upstream_key_state",
    SQLModel.metadata,
    Column("profile", Text, primary_key=True),
    Column("key_id", Text, primary_key=True),
    Column("cooling_until", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("failures", Integer, nullable=False, server_default="0"),
)
"""Upstream key cool-downs (app/db/key_store.py)."""
