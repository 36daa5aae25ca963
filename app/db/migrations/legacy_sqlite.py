"""Adoption of a SQLite database made before the migrations: brought to the baseline, then
stamped with it (app/db/migrations/runner.py), so every later change is a revision.

Before issue 32 each start brought the file up to date itself: `create_all` for new tables,
then the steps below for what `create_all` does not do (a primary key that gained a column,
columns and indexes added to existing tables, indexes retired), then the FTS5 index. They
run here once, against the frozen baseline (`BASELINE` in versions/r0001_baseline.py), not
the live models: a column a later revision adds must be that revision's to add, or its
ALTER would meet the column already there.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, MetaData, text

from app.db import search_index


def bring_to_baseline(conn: Connection, baseline: MetaData) -> None:
    """In the caller's transaction: the baseline's tables, columns and indexes on a file
    some earlier release made, and its full-text index."""
    baseline.create_all(conn)
    _rekey_tables(conn, baseline)
    _add_missing_columns(conn, baseline)
    for index in RETIRED_INDEXES:
        conn.execute(text(f'DROP INDEX IF EXISTS "{index}"'))
    _add_missing_indexes(conn, baseline)
    search_index.install(conn)


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


def _add_missing_columns(conn: Connection, metadata: MetaData) -> None:
    """Additive migration: a column a newer version added is created with its default.

    `create_all` only creates missing tables, so without this a data directory from an
    earlier release would fail on its first query after an upgrade.
    """
    for table in metadata.sorted_tables:
        existing = {name for name, _ in _stored_columns(conn, table.name)}
        for column in table.columns:
            if column.name in existing:
                continue
            ddl = f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" '
            ddl += column.type.compile(dialect=conn.dialect)
            if (default := _default_sql(column)) is not None:
                ddl += f" NOT NULL DEFAULT {default}"
            conn.execute(text(ddl))


def _add_missing_indexes(conn: Connection, metadata: MetaData) -> None:
    """An index a newer version declares on an existing table: `create_all` makes a
    table's indexes only with the table, so an upgraded database would scan without it."""
    for table in metadata.sorted_tables:
        for index in table.indexes:
            index.create(conn, checkfirst=True)


def _rekey_tables(conn: Connection, metadata: MetaData) -> None:
    """A table whose primary key gained a column (memory: one row per key, then per key and
    end user) is rebuilt with the new key, its rows copied, new columns at their defaults.

    SQLite cannot change a primary key in place, and `_add_missing_columns` alone would
    leave the old key refusing a second end user's row. The rebuild follows SQLite's
    recipe (new table, copy, drop, rename). It holds only for a table no other table
    references: with foreign keys on, dropping a referenced one would check (or cascade
    to) the rows that reference it, so such a table is refused here rather than emptied.
    """
    referenced = {fk.column.table.name for t in metadata.tables.values() for fk in t.foreign_keys}
    for table in metadata.sorted_tables:
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
