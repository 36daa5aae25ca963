"""Engine setup: SQLite in WAL mode with a busy timeout, and the FTS5 index over messages
(app/db/search_index.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Connection, Engine, MetaData, event, text
from sqlmodel import SQLModel, create_engine

import app.db.approval_models
import app.db.chat_models
import app.db.job_models
import app.db.mcp_store
import app.db.session_models
import app.db.tool_models
import app.db.webhook_models  # noqa: F401  (registers the tools' and webhooks' tables too)
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
        _rekey_tables(conn)
        _add_missing_columns(conn)
        for index in RETIRED_INDEXES:
            conn.execute(text(f'DROP INDEX IF EXISTS "{index}"'))
        _add_missing_indexes(conn)
        search_index.install(conn)
    return engine


RETIRED_INDEXES = (
    "ix_api_call_turn_id",
    "ix_session_owner",
    "ix_api_call_owner",
    "ix_session_owner_end_user",
)
"""Indexes an earlier release made that no query reads: each still cost every insert.
(The owner indexes became the leading column of the owner-and-end-user ones; the session's
owner-and-end-user one, without the id, gave way to the listing's two.)"""


def _default_sql(column: Column[Any]) -> str | None:
    """The column's Python default as an SQL literal, when it has a literal one."""
    default = getattr(column.default, "arg", None)
    if isinstance(default, bool):
        return str(int(default))
    if isinstance(default, int | float):
        return str(default)
    if isinstance(default, str):
        return "'" + default.replace("'", "''") + "'"
    return None


def _stored_columns(conn: Connection, table: str) -> list[tuple[str, int]]:
    """(name, position in the primary key; 0 when not in it) of a stored table's columns."""
    return [(str(r[1]), int(r[5])) for r in conn.execute(text(f"PRAGMA table_info('{table}')"))]


def _add_missing_columns(conn: Connection) -> None:
    """Additive migration: a column a newer version added is created with its default.

    `create_all` only creates missing tables, so without this a data directory from an
    earlier release would fail on its first query after an upgrade.
    """
    for table in SQLModel.metadata.sorted_tables:
        existing = {name for name, _ in _stored_columns(conn, table.name)}
        for column in table.columns:
            if column.name in existing:
                continue
            ddl = f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" '
            ddl += column.type.compile(dialect=conn.dialect)
            if (default := _default_sql(column)) is not None:
                ddl += f" NOT NULL DEFAULT {default}"
            conn.execute(text(ddl))


def _add_missing_indexes(conn: Connection) -> None:
    """An index a newer version declares on an existing table: `create_all` makes a
    table's indexes only with the table, so an upgraded database would scan without it."""
    for table in SQLModel.metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _rekey_tables(conn: Connection) -> None:
    """A table whose primary key gained a column (memory: one row per key, then per key and
    end user) is rebuilt with the new key, its rows copied, new columns at their defaults.

    SQLite cannot change a primary key in place, and `_add_missing_columns` alone would
    leave the old key refusing a second end user's row. The rebuild follows SQLite's
    recipe (new table, copy, drop, rename). It holds only for a table no other table
    references: with foreign keys on, dropping a referenced one would check (or cascade
    to) the rows that reference it, so such a table is refused here rather than emptied.
    """
    referenced = {
        fk.column.table.name for t in SQLModel.metadata.tables.values() for fk in t.foreign_keys
    }
    for table in SQLModel.metadata.sorted_tables:
        stored = _stored_columns(conn, table.name)
        key = [name for name, at in sorted(stored, key=lambda c: c[1]) if at]
        wanted = [c.name for c in table.primary_key.columns]
        if not stored or key == wanted:
            continue
        if table.name in referenced:
            raise RuntimeError(f"cannot rebuild {table.name} with a new key: others reference it")
        names = {name for name, _ in stored}
        staging = table.to_metadata(MetaData(), name=f"{table.name}__rekeyed")
        staging.indexes.clear()  # their names are the old table's until it is dropped
        staging.create(conn)
        kept = [c for c in table.columns if c.name in names]
        added = [(c.name, _default_sql(c)) for c in table.columns if c.name not in names]
        columns = ", ".join(f'"{name}"' for name in [c.name for c in kept] + [n for n, _ in added])
        values = ", ".join([f'"{c.name}"' for c in kept] + [sql or "NULL" for _, sql in added])
        conn.execute(
            text(f'INSERT INTO "{staging.name}" ({columns}) SELECT {values} FROM "{table.name}"')
        )
        conn.execute(text(f'DROP TABLE "{table.name}"'))
        conn.execute(text(f'ALTER TABLE "{staging.name}" RENAME TO "{table.name}"'))
