"""Baseline: the schema as it stood when migrations began (issue 32), on both backends.

Frozen on purpose: literal tables here, never the live models, so a later model change
cannot leak into the baseline (it ships its own revision; app/db/migrations/__init__.py).
`BASELINE` is also what app/db/migrations/legacy_sqlite.py brings a pre-migration SQLite
database up to before stamping it at this revision.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

from app.db import search_index, search_postgres

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

BASELINE = sa.MetaData()


def _index(name: str, table: str, columns: list[str], *, unique: bool) -> None:
    sa.Index(name, *(BASELINE.tables[table].c[c] for c in columns), unique=unique)


sa.Table(
    "approval",
    BASELINE,
    sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("turn_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("tool_call_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("tool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("summary", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("rule", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("reason", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("grantable", sa.Boolean(), nullable=False, default=True),
    sa.Column("pattern", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("requested_by", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("expires_at", sa.Float(), nullable=False),
    sa.Column("status", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="pending"),
    sa.Column("decision", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("decided_by", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("decided_at", sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_approval_session_id", "approval", ["session_id"], unique=False)
_index("ix_approval_status", "approval", ["status"], unique=False)
_index("ix_approval_turn_id", "approval", ["turn_id"], unique=False)
sa.Table(
    "approval_grant",
    BASELINE,
    sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("tool", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("pattern", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("rule", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("created_by", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.Column("approval_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_approval_grant_session_id", "approval_grant", ["session_id"], unique=False)
sa.Table(
    "context_file",
    BASELINE,
    sa.Column("workspace", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("approved_digest", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("approved_text", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("held_digest", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("held_text", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("approval_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("changed_by_session", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("changed_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("workspace", "name"),
)
_index("ix_context_file_approval_id", "context_file", ["approval_id"], unique=False)
sa.Table(
    "health_probe",
    BASELINE,
    sa.Column("id", sa.Integer(), nullable=False),
    sa.Column("at", sa.Float(), nullable=False, default=0.0),
    sa.PrimaryKeyConstraint("id"),
)
sa.Table(
    "idempotency_record",
    BASELINE,
    sa.Column("owner", sa.Text(), nullable=False),
    sa.Column("key", sa.Text(), nullable=False),
    sa.Column("digest", sa.Text(), nullable=False),
    sa.Column("turn_id", sa.Text(), nullable=False),
    sa.Column("session_id", sa.Text(), nullable=False),
    sa.Column("completion_id", sa.Text(), server_default="", nullable=False),
    sa.Column(
        "created",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        server_default="0",
        nullable=False,
    ),
    sa.Column("events", sa.Text(), nullable=True),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("owner", "key"),
)
sa.Table(
    "memory",
    BASELINE,
    sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column(
        "end_user",
        sqlmodel.sql.sqltypes.AutoString(),
        server_default="",
        nullable=False,
        default="",
    ),
    sa.Column("notes", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("owner", "end_user"),
)
sa.Table(
    "session",
    BASELINE,
    sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column(
        "end_user",
        sqlmodel.sql.sqltypes.AutoString(),
        server_default="",
        nullable=False,
        default="",
    ),
    sa.Column("profile", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("system_prompt", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("tool_snapshot", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"),
    sa.Column("pending_cache_break", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("client_tools", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"),
    sa.Column("transcript_head", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("transcript_len", sa.Integer(), nullable=False, default=0),
    sa.Column(
        "client_instructions", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"
    ),
    sa.Column("anchor_rough", sa.Integer(), nullable=True),
    sa.Column("anchor_billed", sa.Integer(), nullable=True),
    sa.Column("prune_rearm_at", sa.Integer(), nullable=True),
    sa.Column("verdict_pending", sa.Boolean(), nullable=False, default=False),
    sa.Column("compaction_strikes", sa.Integer(), nullable=False, default=0),
    sa.Column("fallback_streak", sa.Integer(), nullable=False, default=0),
    sa.Column("summary_cooldown_until", sa.Float(), nullable=False, default=0.0),
    sa.Column("compactions", sa.Integer(), nullable=False, default=0),
    sa.Column("last_call_at", sa.Float(), nullable=True),
    sa.Column("started_at", sa.Float(), nullable=False),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.Column("lease", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("lease_expires_at", sa.Float(), nullable=True),
    sa.Column(
        "input_tokens",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        nullable=False,
        default=0,
    ),
    sa.Column(
        "output_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "cache_read_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "cache_write_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "reasoning_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column("cost_usd", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="0"),
    sa.Column("cost_unknown_calls", sa.Integer(), nullable=False, default=0),
    sa.Column("upstream_calls", sa.Integer(), nullable=False, default=0),
    sa.PrimaryKeyConstraint("id"),
)
_index(
    "ix_session_owner_end_user_started",
    "session",
    ["owner", "end_user", "started_at", "id"],
    unique=False,
)
_index("ix_session_owner_started", "session", ["owner", "started_at", "id"], unique=False)
sa.Table(
    "tool_set",
    BASELINE,
    sa.Column("digest", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("specs", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint("digest"),
)
sa.Table(
    "upstream_key_state",
    BASELINE,
    sa.Column("profile", sa.Text(), nullable=False),
    sa.Column("key_id", sa.Text(), nullable=False),
    sa.Column("cooling_until", sa.Float(), nullable=False),
    sa.Column("reason", sa.Text(), nullable=False),
    sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
    sa.PrimaryKeyConstraint("profile", "key_id"),
)
sa.Table(
    "api_call",
    BASELINE,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("turn_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column(
        "end_user",
        sqlmodel.sql.sqltypes.AutoString(),
        server_default="",
        nullable=False,
        default="",
    ),
    sa.Column("profile", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("upstream_model", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column(
        "input_tokens",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        nullable=False,
        default=0,
    ),
    sa.Column(
        "output_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "cache_read_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "cache_write_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "reasoning_tokens", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column("cost_usd", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("cost_status", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="unknown"),
    sa.Column("cost_source", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("latency_ms", sa.Float(), nullable=False, default=0.0),
    sa.Column("ttft_ms", sa.Float(), nullable=True),
    sa.Column("outcome", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="ok"),
    sa.Column("cache_break", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_api_call_created_at", "api_call", ["created_at"], unique=False)
_index("ix_api_call_owner_end_user", "api_call", ["owner", "end_user"], unique=False)
_index("ix_api_call_session_id", "api_call", ["session_id"], unique=False)
sa.Table(
    "message",
    BASELINE,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("turn_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("role", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("content", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("api_content", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("tool_calls", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("tool_call_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("tool_name", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("is_error", sa.Boolean(), nullable=False, default=False),
    sa.Column("kind", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("reasoning", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("images", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("active", sa.Boolean(), nullable=False, default=True),
    sa.Column("compacted", sa.Boolean(), nullable=False, default=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_message_session_id", "message", ["session_id"], unique=False)
_index("ix_message_turn_id", "message", ["turn_id"], unique=False)
sa.Table(
    "named_chat",
    BASELINE,
    sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("end_user", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("name", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("owner", "end_user", "name"),
)
_index("ix_named_chat_session_id", "named_chat", ["session_id"], unique=False)
sa.Table(
    "response_record",
    BASELINE,
    sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("owner", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("previous_response_id", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column(
        "first_message_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column(
        "last_message_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
    ),
    sa.Column("body", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="{}"),
    sa.Column("input_items", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"),
    sa.Column("retracted", sa.Boolean(), nullable=False, default=False),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_response_record_created_at", "response_record", ["created_at"], unique=False)
_index("ix_response_record_owner", "response_record", ["owner"], unique=False)
_index("ix_response_record_session_id", "response_record", ["session_id"], unique=False)
sa.Table(
    "session_image",
    BASELINE,
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("sha256", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("media_type", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("data", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("url", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default=""),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("session_id", "sha256"),
)
sa.Table(
    "session_retraction",
    BASELINE,
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("retracted_at", sa.Float(), nullable=False),
    sa.Column("purged", sa.Boolean(), nullable=False, default=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("session_id"),
)
sa.Table(
    "todo_list",
    BASELINE,
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("items", sqlmodel.sql.sqltypes.AutoString(), nullable=False, default="[]"),
    sa.Column("next_id", sa.Integer(), nullable=False, default=1),
    sa.Column("updated_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("session_id"),
)
sa.Table(
    "transcript_key",
    BASELINE,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("prefix_hash", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("position", sa.Integer(), nullable=False),
    sa.Column("last_row_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
    sa.Column("compactions", sa.Integer(), nullable=False, default=0),
    sa.Column("created_at", sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_transcript_key_prefix_hash", "transcript_key", ["prefix_hash"], unique=False)
_index("ix_transcript_key_session_id", "transcript_key", ["session_id"], unique=False)
sa.Table(
    "turn",
    BASELINE,
    sa.Column("id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("session_id", sqlmodel.sql.sqltypes.AutoString(), nullable=False),
    sa.Column("started_at", sa.Float(), nullable=False),
    sa.Column("finished_at", sa.Float(), nullable=True),
    sa.Column("exit_reason", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.Column("iterations", sa.Integer(), nullable=False, default=0),
    sa.Column("error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
    sa.ForeignKeyConstraint(
        ["session_id"],
        ["session.id"],
    ),
    sa.PrimaryKeyConstraint("id"),
)
_index("ix_turn_session_id", "turn", ["session_id"], unique=False)


def upgrade() -> None:
    bind = op.get_bind()
    BASELINE.create_all(bind)
    if bind.dialect.name == "sqlite":
        search_index.install(bind)
    else:
        search_postgres.install(bind)


def downgrade() -> None:
    raise NotImplementedError("the baseline is not undone: restore a backup instead")
