"""A real write for the readiness probe: a disk that turned read-only or full, or a lock held
by a stuck writer, fails here before it fails a user's turn half-way through."""

from __future__ import annotations

import time

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from app.db.store import Store


def database_writable(store: Store) -> str | None:
    """None when a committed write succeeded; otherwise the failure's kind."""
    try:
        with Session(store.engine) as db:
            db.connection().execute(
                text(
                    "INSERT INTO health_probe (id, at) VALUES (1, :at) "
                    "ON CONFLICT (id) DO UPDATE SET at = excluded.at"
                ),
                {"at": time.time()},
            )
            db.commit()
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        return f"database write failed ({type(cause).__name__})"
    return None
