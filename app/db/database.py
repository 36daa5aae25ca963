"""Which database the store runs on: a SQLite file under the data directory (the default),
or PostgreSQL when `COURIER_DATABASE_URL` names one (psycopg 3).

Nothing outside app/db/ learns the dialect but through what this module answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import SecretStr
from sqlalchemy import Engine, create_engine

import app.db.approval_models
import app.db.chat_models
import app.db.job_models
import app.db.mcp_store
import app.db.session_models
import app.db.tool_models
import app.db.webhook_models  # noqa: F401  (registers the tools' and webhooks' tables too)
from app.db import (
    models,  # noqa: F401  (registers the tables on SQLModel.metadata)
    tool_sets,  # noqa: F401  (its table, and the load event resolving session snapshots)
)
from app.db.engine import sqlite_engine
from app.settings.database_url import password_of

if TYPE_CHECKING:
    from app.config import Settings

Target = Path | str
"""A SQLite file's path, or a PostgreSQL URL (`postgresql+psycopg://...`)."""

CONNECT_TIMEOUT_S = 5
"""Seconds to reach PostgreSQL: an unreachable server fails the start (or a request) with
an error, rather than each pooled connection hanging for the kernel's TCP timeout."""


def open_engine(target: Target) -> Engine:
    """The engine of a database; no schema (app/db/migrations/ makes it)."""
    if isinstance(target, Path):
        return sqlite_engine(target)
    return create_engine(
        target,
        # A connection PostgreSQL closed (a restart, an idle timeout) is found at checkout
        # and replaced, instead of failing the request that drew it.
        pool_pre_ping=True,
        connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "courier"},
    )


def kind(target: Target) -> str:
    """`sqlite` or `postgresql`, for what is said to operators (logs, migrate's output)."""
    return "sqlite" if isinstance(target, Path) else "postgresql"


def database(settings: Settings) -> Path | str:
    """Where the store is: the PostgreSQL URL when one is set, else the SQLite file."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    return settings.db_path


def database_password(settings: Settings) -> SecretStr | None:
    """The password in `database_url`, for the redactor."""
    url = settings.database_url.get_secret_value() if settings.database_url else ""
    return SecretStr(password) if (password := password_of(url)) else None
