"""Every hot statement of the store (app/db/raw.py `Hot`) is one that PostgreSQL accepts.

`PREPARE` has the server parse, type and plan a statement without running it, so one pass
over every `Hot` finds what SQLite lets through and PostgreSQL refuses (`active = 1` on a
boolean, a parameter used as two types, SQLite's own functions) without a scenario that
reaches each statement. A statement written for one backend alone says so (`Hot(only=)`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy.dialects import postgresql

import app.db
from app.db.raw import Hot
from app.db.turn_sql import ACTIVE_ROWS
from tests.support.postgres import Cluster


def _hot_statements() -> list[tuple[str, Hot]]:
    found: dict[int, tuple[str, Hot]] = {}
    for info in pkgutil.walk_packages(app.db.__path__, "app.db."):
        if info.name.startswith("app.db.migrations"):
            continue  # Alembic's env.py and revisions run only inside a migration
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Hot):
                found.setdefault(id(value), (f"{info.name}.{name}", value))
    return sorted(found.values(), key=lambda pair: pair[0])


STATEMENTS = _hot_statements()
ON_POSTGRES = [(name, hot) for name, hot in STATEMENTS if hot.only in (None, "postgresql")]


def test_the_walk_finds_the_turn_path_and_the_sqlite_only_ones() -> None:
    assert any(hot is ACTIVE_ROWS for _, hot in ON_POSTGRES)
    assert any(hot.only == "sqlite" for _, hot in STATEMENTS)  # FTS5's own
    assert len(ON_POSTGRES) >= 25


def _numbered(sql: str) -> str:
    """psycopg's `%(name)s` as PREPARE's `$n`, one number per distinct name."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%")


@pytest.fixture(scope="module")
def prepared_on(pg_cluster: Cluster) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    name = pg_cluster.create_database(migrated=True)
    with psycopg.connect(
        host="127.0.0.1", port=pg_cluster.port, user="courier", dbname=name, autocommit=True
    ) as conn:
        yield conn
    pg_cluster.drop_database(name)


@pytest.mark.parametrize(("name", "statement"), ON_POSTGRES, ids=[n for n, _ in ON_POSTGRES])
def test_postgresql_prepares_it(
    name: str, statement: Hot, prepared_on: psycopg.Connection[tuple[object, ...]]
) -> None:
    sql, _ = statement._for(postgresql.psycopg.dialect())
    prepared_on.execute(f"PREPARE checked AS {_numbered(sql)}")  # type: ignore[arg-type]
    prepared_on.execute("DEALLOCATE checked")
