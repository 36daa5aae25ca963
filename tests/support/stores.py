"""Stores on either backend for the store's tests: SQLite in the test's directory, or a
database of the test's own on the run's PostgreSQL cluster (tests/support/postgres.py).

A test module opts in with `STORE_BACKENDS = BACKENDS`: each of its tests that uses the
`store` fixture (tests/support/store.py), `backend` or `backend_target` then runs once per
backend. A test of SQLite's own internals in such a module (PRAGMAs, the FTS5 tables, a
second connection through `sqlite3`) says so with `@pytest.mark.sqlite_only`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from app.db.database import Target
from app.db.store import Store
from tests.support.postgres import POSTGRES

BACKENDS = ("sqlite", POSTGRES)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "sqlite_only: tests SQLite's own internals; not run on PostgreSQL"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = getattr(metafunc.module, "STORE_BACKENDS", None)
    if wanted and "backend" in metafunc.fixturenames:
        # Module-wide, so a module's shared server (or store) serves all its tests of one
        # backend before the other's starts.
        metafunc.parametrize("backend", wanted, scope="module")


@pytest.fixture
def backend() -> str:
    """The backend this test runs on: SQLite unless its module opts in to both."""
    return "sqlite"


@pytest.fixture
def backend_target(backend: str, db_path: Path, request: pytest.FixtureRequest) -> Target:
    """An empty database of this test's own on `backend`: the SQLite file's path
    (`db_path`), or a fresh PostgreSQL database's URL (dropped after the test)."""
    return _target(backend, db_path, request, "pg_url")


@pytest.fixture
def store_target(backend: str, db_path: Path, request: pytest.FixtureRequest) -> Target:
    """The same, at the newest schema on PostgreSQL (a copy of a migrated template)."""
    return _target(backend, db_path, request, "pg_migrated_url")


def _target(backend: str, db_path: Path, request: pytest.FixtureRequest, pg: str) -> Target:
    if backend != POSTGRES:
        return db_path
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("tests SQLite's own internals")
    return str(request.getfixturevalue(pg))


def raw_sql(
    store: Store, sql: str, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] = ()
) -> list[tuple[Any, ...]]:
    """One statement (`:name` parameters; a list of mappings runs it per mapping) on a
    connection of its own, committed: what an operator or another process does to the
    database behind the store's back. Its rows, for a query."""
    with store.engine.connect() as conn:
        args = list(params) if isinstance(params, Sequence) else params
        result = conn.execute(text(sql), args or {})
        rows = [tuple(r) for r in result] if result.returns_rows else []
        conn.commit()
    return rows
