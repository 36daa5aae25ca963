"""`COURIER_DATABASE_URL` read as settings read it: which forms name PostgreSQL, and the
password inside (for the redactor). No SQLAlchemy here: settings load before anything heavy."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

SCHEMES = ("postgresql+psycopg", "postgresql", "postgres")


def normalised(url: str) -> str | None:
    """The URL with psycopg 3 named as its driver; None when empty. A ValueError names only
    the scheme of anything else: the rest of the URL may hold the password."""
    url = url.strip()
    if not url:
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            f"COURIER_DATABASE_URL: scheme {scheme[:40]!r} is not PostgreSQL; use "
            "postgresql+psycopg://user:password@host:5432/db (or leave it unset for SQLite)"
        )
    return f"postgresql+psycopg://{rest}"


def password_of(url: str) -> str | None:
    """The password an error might quote without the URL around it."""
    password = urlsplit(url).password
    return unquote(password) if password else None
