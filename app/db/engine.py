"""The SQLite engine: WAL mode, a busy timeout, foreign keys, reads through a memory map, and
an owner-only file. The schema is the migrations' (app/db/migrations/); the choice between
SQLite and PostgreSQL is app/db/database.py's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlmodel import create_engine

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


def sqlite_engine(db_path: Path) -> Engine:
    """The engine of a SQLite file, made (owner-only) when missing; no schema."""
    make_data_dir(db_path.parent)
    # Made owner-only before SQLite opens it: SQLite gives the -wal and -shm files the
    # database file's own mode, so they are owner-only too.
    os.close(os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE))
    engine = create_engine(
        f"sqlite:///{db_path}",
        connect_args={"check_same_thread": False, "timeout": 5},
    )
    event.listen(engine, "connect", _on_connect)
    return engine
