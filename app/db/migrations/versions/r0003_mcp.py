"""MCP listings kept across restarts and the `mcp_call` ledger (issue 31): two tables.

Issue 31's tables landed on main just before the migrations, through `create_all`: a SQLite
file made by a build in between already has them and is adopted at the baseline (0001), so
each step here checks first and makes only what is missing.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString
_BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    tables = set(sa.inspect(op.get_bind()).get_table_names())
    if "mcp_listing" not in tables:
        op.create_table(
            "mcp_listing",
            sa.Column("server", _TEXT(), nullable=False),
            sa.Column("config_digest", _TEXT(), nullable=False),
            sa.Column("tools", _TEXT(), nullable=False),
            sa.Column("listed_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("server"),
        )
    if "mcp_call" not in tables:
        op.create_table(
            "mcp_call",
            sa.Column("id", _BIG, nullable=False),
            sa.Column("session_id", _TEXT(), nullable=False),
            sa.Column("turn_id", _TEXT(), nullable=False),
            sa.Column("call_id", _TEXT(), nullable=False),
            sa.Column("owner", _TEXT(), nullable=False),
            sa.Column("end_user", _TEXT(), nullable=False),
            sa.Column("server", _TEXT(), nullable=False),
            sa.Column("tool", _TEXT(), nullable=False),
            sa.Column("remote", sa.Boolean(), nullable=False),
            sa.Column("started_at", sa.Float(), nullable=False),
            sa.Column("duration_ms", sa.Float(), nullable=False),
            sa.Column("outcome", _TEXT(), nullable=False),
            sa.Column("result_chars", sa.Integer(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_mcp_call_session_turn", "mcp_call", ["session_id", "turn_id"])


def downgrade() -> None:
    raise NotImplementedError("not undone: restore a backup taken before it ran")
