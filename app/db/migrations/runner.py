"""Bringing a database to the schema this Courier knows, or refusing it with a clear reason.

The state of a database (`schema_state`): `empty` (nothing yet), `legacy` (a SQLite file
made before the migrations: tables, no version), `behind` (an older revision this code
knows), `current` (the newest revision), `ahead` (a revision this code does not know: a
newer Courier ran on it). `upgrade` runs in ONE transaction that holds the database's
migration lock before it reads the state: PostgreSQL's advisory lock, SQLite's write lock
(BEGIN IMMEDIATE). Reading the state before taking the lock let two starting replicas both
see `empty` and both create the tables. `ahead` is refused, never downgraded: the newer
code's rows may mean what this code cannot read.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, inspect, text

SchemaState = Literal["empty", "legacy", "behind", "current", "ahead"]

BASELINE_REVISION = "0001"
LOCK_KEY = 0x436F7572
"""PostgreSQL's advisory lock id for migrations ("Cour"): every process that migrates one
database takes it, so they run one after the other."""
UNVERSIONED = ("message_fts", "message_search", "alembic_version")
"""Tables the models do not describe: alembic's own and the full-text index's (FTS5's
virtual table and shadow tables on SQLite, the tsvector table on PostgreSQL), made by the
revisions with the dialect's own DDL."""


class SchemaError(Exception):
    """The database's schema is not one this Courier may run on."""


class SchemaTooNew(SchemaError):
    """A newer Courier migrated this database."""


class SchemaNotCurrent(SchemaError):
    """The database is behind (or empty) and this process was told not to migrate."""


def include_object(obj: Any, name: str | None, kind: str, reflected: bool, compare: Any) -> bool:
    """What autogenerate and the metadata comparison look at: not `UNVERSIONED`."""
    table = name if kind == "table" else getattr(getattr(obj, "table", None), "name", None)
    return not (table or "").startswith(UNVERSIONED)


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", "app.db:migrations")
    config.attributes["connection"] = connection
    return config


@functools.cache
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision this code knows."""
    found = _script().get_current_head()
    assert found is not None
    return found


def _known(revision: str) -> bool:
    try:
        return _script().get_revision(revision) is not None
    except CommandError:
        return False


def schema_state(conn: Connection) -> tuple[SchemaState, str | None]:
    """The state of the database behind `conn`, and its revision when it has one."""
    revision = MigrationContext.configure(conn).get_current_revision()
    if revision is None:
        tables = [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
        if not tables:
            return "empty", None
        if conn.dialect.name != "sqlite":
            # Only SQLite files predate the migrations: tables without a version here were
            # made by something else, and writing into them could break both.
            raise SchemaError(
                "the database has tables but no Courier schema version: point "
                "COURIER_DATABASE_URL at an empty database or one Courier migrated"
            )
        return "legacy", None
    if revision == head():
        return "current", revision
    return ("behind" if _known(revision) else "ahead"), revision


def too_new(revision: str | None) -> SchemaTooNew:
    return SchemaTooNew(
        f"the database schema is at revision {revision}, newer than this Courier (which "
        f"knows up to {head()}): upgrade Courier, or restore a backup taken before the "
        "newer version ran"
    )


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """One transaction holding the database's migration lock."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            dbapi: Any = conn.connection.dbapi_connection
            # pysqlite begins a transaction only before DML, so the DDL would run outside
            # it, statement by statement; with its own BEGIN IMMEDIATE the whole migration
            # is one transaction holding the write lock from the start.
            kept, dbapi.isolation_level = dbapi.isolation_level, None
            # Off for the migration (it cannot change inside a transaction): a batch
            # recreate drops a table others reference, which with foreign keys on would
            # check or cascade to their rows.
            keys = conn.exec_driver_sql("PRAGMA foreign_keys").scalar()
            conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.rollback()
                    raise
                conn.commit()
            finally:
                conn.exec_driver_sql(f"PRAGMA foreign_keys={int(bool(keys))}")
                dbapi.isolation_level = kept
        return
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        yield conn


def upgrade(engine: Engine) -> tuple[SchemaState, SchemaState]:
    """Bring the database to `head()`; the state before and after. Raises SchemaTooNew."""
    from app.db.migrations import legacy_sqlite
    from app.db.migrations.versions.r0001_baseline import BASELINE

    with _locked(engine) as conn:
        before, revision = schema_state(conn)
        if before == "ahead":
            raise too_new(revision)
        if before == "current":
            return before, before
        config = _config(conn)
        if before == "legacy":
            legacy_sqlite.bring_to_baseline(conn, BASELINE)
            command.stamp(config, BASELINE_REVISION)
        command.upgrade(config, "head")
    return before, "current"


def check(engine: Engine) -> None:
    """Refuse a database not at `head()`: a server told not to migrate runs on none other."""
    with engine.connect() as conn:
        state, revision = schema_state(conn)
    if state == "ahead":
        raise too_new(revision)
    if state != "current":
        raise SchemaNotCurrent(
            f"the database schema is {state} (this Courier needs revision {head()}): run "
            "`courier migrate`, or start without --no-migrate"
        )
