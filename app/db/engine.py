"""Engine setup: SQLite in WAL mode with a busy timeout, and the FTS5 index over messages
(app/db/search_index.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event, text
from sqlmodel import SQLModel, create_engine

import app.db.approval_models
import app.db.chat_models
import app.db.session_models
import app.db.tool_models  # noqa: F401  (registers the tools' tables too)
from app.db import (
    models,  # noqa: F401  (registers the tables on SQLModel.metadata)
    search_index,
    tool_sets,  # noqa: F401  (its table, and the load event resolving session snapshots)
)
from app.db.instance import PRIVATE_FILE_MODE, make_data_dir

MMAP_BYTES = 256 * 1024 * 1024


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reads through a memory map: each commit by another pooled connection (the loop's
    # reads, the writer thread's units) otherwise sends this one back to pread every page.
    cursor.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
    cursor.close()


def make_engine(db_path: Path) -> Engine:
    """Create the engine and the schema; idempotent, so every startup may call it."""
    make_data_dir(db_path.parent)
    # Made owner-only before SQLite opens it: SQLite gives the -wal and -shm files the
    # database file's own mode, so they are owner-only too.
    os.close(os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE))
    engine = create_engine(
        f"sqlite:///{db_path}",
        connect_args={"check_same_thread": False, "timeout": 5},
    )
    event.listen(engine, "connect", _on_connect)
    SQLModel.metadata.create_all(engine)
    with engine.begin() as conn:
        _add_missing_columns(conn)
        for index in RETIRED_INDEXES:
            conn.execute(text(f'DROP INDEX IF EXISTS "{index}"'))
        search_index.install(conn)
    return engine


RETIRED_INDEXES = ("ix_api_call_turn_id",)
"""Indexes an earlier release made that no query reads: each still cost every insert."""


def _add_missing_columns(conn: Connection) -> None:
    """Additive migration: a column a newer version added is created with its default.

    `create_all` only creates missing tables, so without this a data directory from an
    earlier release would fail on its first query after an upgrade.
    """
    for table in SQLModel.metadata.sorted_tables:
        existing = {row[1] for row in conn.execute(text(f"PRAGMA table_info('{table.name}')"))}
        for column in table.columns:
            if column.name in existing:
                continue
            ddl = f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" '
            ddl += column.type.compile(dialect=conn.dialect)
            default = getattr(column.default, "arg", None)
            if isinstance(default, bool):
                ddl += f" NOT NULL DEFAULT {int(default)}"
            elif isinstance(default, int | float):
                ddl += f" NOT NULL DEFAULT {default}"
            elif isinstance(default, str):
                escaped = default.replace("'", "''")
                ddl += f" NOT NULL DEFAULT '{escaped}'"
            conn.execute(text(ddl))
