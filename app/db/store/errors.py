"""The store's own names for what goes wrong in it.

The agent catches these, never the driver's exceptions, so a second backend (PostgreSQL)
changes nothing above `app/db/`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import SQLAlchemyError


class LeaseLost(Exception):
    """The turn no longer holds the session's lease; its writes are refused."""


class PersistenceError(Exception):
    """A write failed; the caller ends the turn rather than act on unrecorded intent.

    The store's own name for a database failure: the agent catches this, never the
    driver's exceptions, so a second backend (PostgreSQL) changes nothing above `app/db/`.
    """


STORE_FAILURES: tuple[type[Exception], ...] = (PersistenceError, LeaseLost, SQLAlchemyError)
"""What a failed store call raises inside a unit, before the unit names it: code that runs
inside one (a tool's `in_unit` work) lets these through, so the unit rolls back whole."""


@contextmanager
def as_persistence_error() -> Iterator[None]:
    try:
        yield
    except SQLAlchemyError as exc:
        raise PersistenceError(f"{type(exc).__name__}: {exc}") from exc
