"""The turn path's hot statements: compiled once per dialect, run on the DBAPI cursor.

SQLAlchemy Core costs 40-80 µs per `execute` before SQLite sees the statement (a cache key
built from the statement tree, the compiled-cache lookup, an execution context, a result
object); a turn runs about twenty of them on the writer thread, several milliseconds of
the request's CPU. The DBAPI cursor runs the same SQL in a few microseconds. The
statements stay SQLAlchemy `text()` with named parameters, compiled once for the engine's
dialect, so the PostgreSQL path keeps working: only the parameter style changes.

Only for statements whose values SQLite takes as they are (str, int, float, bool, None);
anything that needs a type processor goes through Core.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.exc import DBAPIError

_POSITIONAL = {"qmark", "numeric", "format", "numeric_dollar"}

_counters: WeakKeyDictionary[Engine, Callable[[], None]] = WeakKeyDictionary()
"""Per engine, what to call per statement: `stats.count_db_work` counts these too, so the
statements-per-turn figures stay true when a statement skips the engine's events."""


def count_statements(engine: Engine, on_statement: Callable[[], None]) -> None:
    _counters[engine] = on_statement


class Hot:
    """One SQL statement with `:name` parameters, compiled per dialect on first use."""

    __slots__ = ("_compiled", "only", "sql")

    def __init__(self, sql: str, *, only: str | None = None) -> None:
        self.sql = sql
        self.only = only
        """The one dialect this statement is written for (FTS5's are SQLite's alone); None
        for the statements both backends run, which tests/unit/test_postgres_statements.py
        has PostgreSQL prepare."""
        self._compiled: dict[str, tuple[str, tuple[str, ...] | None]] = {}

    def _for(self, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
        key = f"{dialect.name}:{dialect.paramstyle}"
        found = self._compiled.get(key)
        if found is None:
            compiled = text(self.sql).compile(dialect=dialect)
            order = compiled.positiontup if dialect.paramstyle in _POSITIONAL else None
            found = self._compiled[key] = (
                compiled.string,
                tuple(order) if order is not None else None,
            )
        return found

    def run(self, conn: Connection, params: Mapping[str, Any]) -> Any:
        """Execute once; returns the DBAPI cursor (rowcount, fetch*)."""
        sql, order = self._for(conn.dialect)
        args: Any = params if order is None else tuple(params[name] for name in order)
        return _execute(conn, sql, args, many=False)

    def run_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> Any:
        """`executemany`: one statement compiled once, counted once."""
        sql, order = self._for(conn.dialect)
        args: Any = rows if order is None else [tuple(r[name] for name in order) for r in rows]
        return _execute(conn, sql, args, many=True)


def _execute(conn: Connection, sql: str, args: Any, *, many: bool) -> Any:
    # The unit's own DBAPI connection, so the statement joins its transaction.
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    if (count := _counters.get(conn.engine)) is not None:
        count()
    try:
        if many:
            cursor.executemany(sql, args)
        else:
            cursor.execute(sql, args)
    except conn.dialect.loaded_dbapi.Error as exc:
        # The same exception types Core raises (OperationalError, IntegrityError, ...), so
        # callers and the store's PersistenceError wrapping see no difference.
        raise DBAPIError.instance(
            sql, args, exc, conn.dialect.loaded_dbapi.Error, dialect=conn.dialect
        ) from exc
    return cursor


def insert_sql(table: str, columns: Sequence[str], *, returning: str | None = None) -> Hot:
    """`INSERT INTO table (columns) VALUES (:column, ...)` as a hot statement; `returning`
    names a column the insert hands back (SQLite 3.35+ and PostgreSQL both speak it,
    where `cursor.lastrowid` is SQLite's alone)."""
    names = ", ".join(f'"{c}"' for c in columns)
    params = ", ".join(f":{c}" for c in columns)
    back = f' RETURNING "{returning}"' if returning else ""
    return Hot(f'INSERT INTO "{table}" ({names}) VALUES ({params}){back}')
