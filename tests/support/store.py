"""The store fixture: a fresh SQLite store in the test's own directory, closed afterwards.

A test module that needs rows in it (a session, a lease) overrides `store` with a fixture
of the same name that takes this one and adds them; a test that reaches the file itself
(a second connection, a reopened store) finds it at `db_path`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db.database import Target
from app.db.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the `store` fixture's database file is."""
    return tmp_path / "courier.db"


@pytest.fixture
def store(store_target: Target) -> Iterator[Store]:
    """A fresh store; closed after the test, so its writer thread does not outlive it.
    SQLite at `db_path`, or PostgreSQL in a module that opts in (tests/support/stores.py)."""
    opened = Store.open(store_target)
    yield opened
    opened.close()
