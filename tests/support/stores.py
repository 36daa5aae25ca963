"""Stores on either backend for the store's tests: SQLite in the test's directory, or a
database of the test's own on the session's PostgreSQL cluster (tests/support/postgres.py)."""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlmodel import SQLModel

import app.db.engine  # noqa: F401  (registers every table on SQLModel.metadata)
from app.db import idempotency_store, key_store


def create_postgres_schema(engine: Engine) -> None:
    """Today's tables on an empty PostgreSQL database."""
    SQLModel.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(text(idempotency_store._DDL))
        conn.execute(text(key_store._DDL))
