"""Alembic's environment: always online, on the connection the runner passes in its own
transaction (app/db/migrations/runner.py), never a URL of its own: the lock it holds
(PostgreSQL's advisory lock, SQLite's write lock) must cover the revisions it runs."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection
from sqlmodel import SQLModel

import app.db.database  # noqa: F401  (registers every table on SQLModel.metadata)
from app.db.migrations.runner import include_object

connection: Connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    # SQLite alters a table by recreating it: a revision's batch_alter_table does that there
    # and plain ALTERs on PostgreSQL.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    include_object=include_object,
)
with context.begin_transaction():
    context.run_migrations()
