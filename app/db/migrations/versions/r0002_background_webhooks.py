"""Background responses and the webhook outbox (issue 33): response_record's background
columns, response_event_chunk, webhook_delivery and webhook_attempt.

Issue 33 landed on main just before the migrations, adding these through `create_all` and
the old start-up steps: a SQLite file made by a build between the two already has them and
is adopted at the baseline (0001). So each step here checks first and makes only what is
missing; a new database runs every step.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    existing = sa.inspect(op.get_bind())
    tables = set(existing.get_table_names())
    if "response_event_chunk" not in tables:
        op.create_table(
            "response_event_chunk",
            sa.Column("response_id", _TEXT(), nullable=False),
            sa.Column("first_seq", sa.Integer(), nullable=False),
            sa.Column("last_seq", sa.Integer(), nullable=False),
            sa.Column("events", _TEXT(), nullable=False),
            sa.PrimaryKeyConstraint("response_id", "first_seq"),
        )
    if "webhook_attempt" not in tables:
        op.create_table(
            "webhook_attempt",
            sa.Column("delivery_id", _TEXT(), nullable=False),
            sa.Column("attempt", sa.Integer(), nullable=False),
            sa.Column("at", sa.Float(), nullable=False),
            sa.Column("url", _TEXT(), nullable=False),
            sa.Column("status", sa.Integer(), nullable=True),
            sa.Column("error", _TEXT(), nullable=True),
            sa.Column("duration_ms", sa.Integer(), nullable=False),
            sa.PrimaryKeyConstraint("delivery_id", "attempt"),
        )
    if "webhook_delivery" not in tables:
        op.create_table(
            "webhook_delivery",
            sa.Column("id", _TEXT(), nullable=False),
            sa.Column("owner", _TEXT(), nullable=False),
            sa.Column("event_type", _TEXT(), nullable=False),
            sa.Column("body", _TEXT(), nullable=False),
            sa.Column("state", _TEXT(), nullable=False),
            sa.Column("attempts", sa.Integer(), nullable=False),
            sa.Column("next_attempt_at", sa.Float(), nullable=False),
            sa.Column("claimed_by", _TEXT(), nullable=True),
            sa.Column("claim_until", sa.Float(), nullable=True),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("give_up_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
    if "ix_webhook_delivery_due" not in {
        i["name"] for i in existing.get_indexes("webhook_delivery")
    }:
        op.create_index("ix_webhook_delivery_due", "webhook_delivery", ["state", "next_attempt_at"])
    have = {c["name"] for c in existing.get_columns("response_record")}
    # Server defaults: the rows already stored get the models' values.
    added = [
        sa.Column("background", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("status", _TEXT(), nullable=False, server_default=""),
        sa.Column("turn_id", _TEXT(), nullable=True),
        sa.Column("events_through", sa.Integer(), nullable=False, server_default="-1"),
    ]
    with op.batch_alter_table("response_record") as batch:
        for column in added:
            if column.name not in have:
                batch.add_column(column)


def downgrade() -> None:
    raise NotImplementedError("not undone: restore a backup taken before it ran")
