"""Scheduled jobs (issue 33, part B): the job, its runs, and the named leases a scheduler
holds. `UNIQUE(job_id, scheduled_for)` is what makes a tick fire once (app/db/job_store.py).

Builds of the jobs branch before the migrations made these through `create_all`: each step
checks first and makes only what is missing.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel.sql.sqltypes
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_TEXT = sqlmodel.sql.sqltypes.AutoString


def upgrade() -> None:
    tables = set(sa.inspect(op.get_bind()).get_table_names())
    if "job" not in tables:
        op.create_table(
            "job",
            sa.Column("id", _TEXT(), nullable=False),
            sa.Column("owner", _TEXT(), nullable=False),
            sa.Column("end_user", _TEXT(), nullable=False),
            sa.Column("name", _TEXT(), nullable=False),
            sa.Column("schedule", _TEXT(), nullable=False),
            sa.Column("input", _TEXT(), nullable=False),
            sa.Column("instructions", _TEXT(), nullable=True),
            sa.Column("profile", _TEXT(), nullable=False),
            sa.Column("max_cost_usd", _TEXT(), nullable=False),
            sa.Column("session_mode", _TEXT(), nullable=False),
            sa.Column("session_id", _TEXT(), nullable=True),
            sa.Column("paused", sa.Boolean(), nullable=False),
            sa.Column("next_run_at", sa.BigInteger(), nullable=True),
            sa.Column("running_run_id", _TEXT(), nullable=True),
            sa.Column("consecutive_failures", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("updated_at", sa.Float(), nullable=False),
            sa.Column("deleted_at", sa.Float(), nullable=True),
            sa.PrimaryKeyConstraint("id"),
        )
        op.create_index("ix_job_next_run_at", "job", ["next_run_at"])
        op.create_index("ix_job_owner", "job", ["owner"])
    if "job_run" not in tables:
        op.create_table(
            "job_run",
            sa.Column("id", _TEXT(), nullable=False),
            sa.Column("job_id", _TEXT(), nullable=False),
            sa.Column("owner", _TEXT(), nullable=False),
            sa.Column("trigger", _TEXT(), nullable=False),
            sa.Column("scheduled_for", sa.BigInteger(), nullable=True),
            sa.Column("missed", sa.Integer(), nullable=False),
            sa.Column("status", _TEXT(), nullable=False),
            sa.Column("exit_reason", _TEXT(), nullable=True),
            sa.Column("error", _TEXT(), nullable=True),
            sa.Column("response_id", _TEXT(), nullable=True),
            sa.Column("session_id", _TEXT(), nullable=True),
            sa.Column("cost_usd", _TEXT(), nullable=True),
            sa.Column("cost_status", _TEXT(), nullable=True),
            sa.Column("upstream_calls", sa.Integer(), nullable=False),
            sa.Column("launcher", _TEXT(), nullable=False),
            sa.Column("created_at", sa.Float(), nullable=False),
            sa.Column("started_at", sa.Float(), nullable=True),
            sa.Column("finished_at", sa.Float(), nullable=True),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("job_id", "scheduled_for", name="uq_job_run_tick"),
        )
        op.create_index("ix_job_run_job", "job_run", ["job_id", "id"])
    if "courier_lease" not in tables:
        op.create_table(
            "courier_lease",
            sa.Column("name", _TEXT(), nullable=False),
            sa.Column("holder", _TEXT(), nullable=False),
            sa.Column("expires_at", sa.Float(), nullable=False),
            sa.PrimaryKeyConstraint("name"),
        )


def downgrade() -> None:
    raise NotImplementedError("not undone: restore a backup taken before it ran")
