"""Stores on either backend for the store's tests: SQLite in the test's directory, or a
database of the test's own on the session's PostgreSQL cluster (tests/support/postgres.py).

A test takes `backend_target` (parametrise it with `backend` over `BACKENDS`, or let the
fixture's own parameters do it) and opens what it needs on it: `Store.open(target)`,
`open_engine(target)`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.db.database import Target
from tests.support.postgres import POSTGRES

BACKENDS = ("sqlite", POSTGRES)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each backend in turn."""
    return str(request.param)


@pytest.fixture
def backend_target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    """An empty database of this test's own on `backend`: a SQLite file's path, or a fresh
    PostgreSQL database's URL (dropped after the test)."""
    if backend == POSTGRES:
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "courier.db"
