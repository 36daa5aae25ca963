"""`courier migrate` and the schema check of `courier serve`, as the real commands, on
SQLite and on PostgreSQL (issue 32: "courier migrate on an empty and on a current database
both succeed; a server refuses a schema newer than itself with a clear message")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from app.db.database import Target, open_engine
from app.db.migrations import runner
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
GOOD_KEY = "a-perfectly-fine-key-123"


def _courier(tmp_path: Path, target: Target, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    env |= {
        "COURIER_DATA_DIR": str(tmp_path / "data"),
        "COURIER_PORT": "0",
        "COURIER_API_KEY": GOOD_KEY,
        # Never reached: every case here ends before a turn.
        "COURIER_UPSTREAM_BASE_URL": "http://127.0.0.1:9/v1",
    }
    if isinstance(target, str):
        env["COURIER_DATABASE_URL"] = target
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def target(backend_target: Target, tmp_path: Path) -> Target:
    """The backend's database, where the commands below find it: a SQLite file is the
    data directory's courier.db."""
    if isinstance(backend_target, Path):
        return tmp_path / "data" / "courier.db"
    return backend_target


def test_migrate_on_an_empty_then_a_current_database(tmp_path: Path, target: Target) -> None:
    checked = _courier(tmp_path, target, "migrate", "--check")
    assert checked.returncode == 1, checked.stderr
    assert ": empty" in checked.stdout

    first = _courier(tmp_path, target, "migrate")
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"database ({_kind(target)}): empty",
        f"database ({_kind(target)}): current at revision {runner.head()}",
    ]
    again = _courier(tmp_path, target, "migrate")
    assert again.returncode == 0, again.stderr
    assert f"current at revision {runner.head()}" in again.stdout.splitlines()[0]
    assert _courier(tmp_path, target, "migrate", "--check").returncode == 0


def _kind(target: Target) -> str:
    return "sqlite" if isinstance(target, Path) else "postgresql"


def _stamp_newer(target: Target) -> None:
    engine = open_engine(target)
    runner.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dface'"))
    engine.dispose()


def test_a_server_refuses_a_schema_newer_than_itself(tmp_path: Path, target: Target) -> None:
    _stamp_newer(target)
    for args in (("serve",), ("serve", "--no-migrate"), ("migrate",)):
        result = _courier(tmp_path, target, *args)
        assert result.returncode in (1, 2), result.stderr
        refusal = result.stderr.strip().splitlines()[-1]
        assert refusal == (
            "courier: the database schema is at revision f00dface, newer than this Courier "
            f"(which knows up to {runner.head()}): upgrade Courier, or restore a backup "
            "taken before the newer version ran"
        ), result.stderr
    engine = open_engine(target)
    with engine.connect() as conn:  # refused, left as it was
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    assert version == "f00dface"


def test_serve_told_not_to_migrate_refuses_an_empty_database(
    tmp_path: Path, target: Target
) -> None:
    result = _courier(tmp_path, target, "serve", "--no-migrate")
    assert result.returncode == 2
    assert "run `courier migrate`" in result.stderr


def test_a_database_url_of_another_kind_is_refused_without_echoing_it(tmp_path: Path) -> None:
    secret_url = "mysql://courier:hunter2-not-echoed@db.internal/courier"
    result = _courier(tmp_path, secret_url, "serve")
    assert result.returncode == 2
    assert "is not PostgreSQL" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
