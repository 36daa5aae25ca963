"""A throwaway PostgreSQL cluster for the tests that run the store on PostgreSQL.

Debian's own binaries (`/usr/lib/postgresql/<N>/bin`, the highest N; `make pg-deps` installs
the `postgresql` package where it is missing) run one cluster per pytest session: initdb into
a fresh directory under /tmp, the server on a free loopback port with its unix socket in the
same directory, fsync off (the data is thrown away; durability there would cost every test
seconds of disk flushes), stopped and removed at the end of the session and at exit, so an
interrupted run leaves nothing. initdb refuses to run as root: as root the cluster runs as
the `postgres` user (the package creates it), or `nobody` where that user is missing. The
directory is under /tmp, not pytest's tmp_path: that one is 0700 root, which the server's
user cannot traverse.

Each test gets a database of its own (`pg_url`), a clone of an empty template: a database
shared between tests leaked rows from one into another's listing in the prototype.

Without the binaries the tests that need the cluster skip with the install line, unless
COURIER_REQUIRE_POSTGRES=1 (CI): then they fail, so a machine that should run them cannot
silently stop.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from app.ops.ports import free_port

POSTGRES = "postgresql"
"""The `backend` parameter's value for PostgreSQL (tests/support/stores.py)."""
TEMPLATE = "courier_template"
INSTALL = "apt-get install postgresql (or `make pg-deps` as root)"


def bin_dir() -> Path | None:
    """Debian's binaries of the highest installed major version, else initdb's on PATH."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name),
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).resolve().parent if on_path else None


def _server_user() -> str | None:
    """Who runs the cluster: None (ourselves) unless we are root, which initdb refuses."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("running as root with neither a postgres nor a nobody user for initdb")


class Cluster:
    """One running cluster: `url(db)` for SQLAlchemy, `admin()` for CREATE/DROP DATABASE."""

    def __init__(self, binaries: Path) -> None:
        self._bin = binaries
        self._user = _server_user()
        self.dir = Path(tempfile.mkdtemp(prefix="courier-pg.", dir="/tmp"))
        self.port = free_port()
        self._running = False
        self._migrated = False

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self._bin / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr}{tail}")

    def start(self) -> None:
        if self._user is not None:
            shutil.chown(self.dir, user=self._user)
        data = str(self.dir / "data")
        self._run(
            "initdb", "-D", data, "-U", "courier", "--auth=trust", "-E", "UTF8",
            "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._running = True
        self._run("pg_ctl", "-D", data, "-l", str(self.dir / "server.log"), "-w", "-t", "60",
                  "-o", options, "start")  # fmt: skip

    def stop(self) -> None:
        if self._running:
            self._running = False
            with contextlib.suppress(RuntimeError, OSError):
                self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str) -> str:
        """The SQLAlchemy URL of one database, over the loopback port."""
        return f"postgresql+psycopg://courier@127.0.0.1:{self.port}/{database}"

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection to the maintenance database (CREATE DATABASE cannot run
        inside a transaction)."""
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user="courier", dbname="postgres", autocommit=True
        )

    def create_database(self, *, migrated: bool = False) -> str:
        """A fresh database, empty or (`migrated`) at the newest schema; its name.

        A migrated one is a copy of a template migrated once per run, where migrating
        each test's database ran the whole baseline again. FILE_COPY copies the files
        (its checkpoint is cheap with fsync off); the default strategy logs every page,
        which cost a third more of the PostgreSQL store tests' time."""
        name = f"t_{secrets.token_hex(6)}"
        template = f" TEMPLATE {self._template()} STRATEGY FILE_COPY" if migrated else ""
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"{template}')  # type: ignore[arg-type]
        return name

    def _template(self) -> str:
        if not self._migrated:
            from app.db.database import open_engine
            from app.db.migrations import runner

            with self.admin() as conn:
                conn.execute(f'CREATE DATABASE "{TEMPLATE}"')  # type: ignore[arg-type]
            engine = open_engine(self.url(TEMPLATE))
            runner.upgrade(engine)
            engine.dispose()  # a template with a session open cannot be copied
            self._migrated = True
        return TEMPLATE

    def schema_revision(self, name: str) -> str | None:
        """The migration revision a database is at (None before any)."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="courier", dbname=name, autocommit=True
        ) as conn:
            found = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
            if not found or not found[0]:
                return None
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            return str(row[0]) if row else None

    def drop_database(self, name: str) -> None:
        # FORCE: a test that failed half-way may leave a pooled connection open.
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


_cluster: Cluster | None = None


def _needed(items: list[pytest.Item]) -> bool:
    """A collected test asks for the cluster, or runs with `backend` "postgresql" (it
    reaches the cluster through `request.getfixturevalue`, which collection cannot see),
    or every server runs on PostgreSQL (tests/support/server.py)."""
    if os.environ.get("COURIER_TEST_BACKEND") == POSTGRES:
        return True
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pg_cluster" in getattr(item, "fixturenames", ()) or params.get("backend") == POSTGRES:
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the cluster once, before the first test, when a collected test needs it.

    Started here rather than inside a test's setup: the in-process tier refuses a process
    started by a test (tests/unit/conftest.py), and the database server is the session's
    shared service, like a database a developer runs beside the suite, not a test's part.
    """
    global _cluster
    binaries = bin_dir()
    if not _needed(session.items) or binaries is None:
        return
    cluster = Cluster(binaries)
    atexit.register(cluster.stop)
    cluster.start()
    _cluster = cluster


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _cluster is not None:
        _cluster.stop()


def server_database() -> str:
    """A fresh, empty database's URL for a server of the run (left to the cluster's end)."""
    if _cluster is None:
        raise RuntimeError(f"COURIER_TEST_BACKEND=postgresql, but {INSTALL}")
    return _cluster.url(_cluster.create_database())


@pytest.fixture(scope="session")
def pg_cluster() -> Cluster:
    """The session's cluster; skips (or fails under COURIER_REQUIRE_POSTGRES=1) without one."""
    if _cluster is None:
        message = f"PostgreSQL is not installed here: {INSTALL}"
        if os.environ.get("COURIER_REQUIRE_POSTGRES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return _cluster


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """The URL of a fresh, empty database of this test's own, dropped after it."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def pg_migrated_url(pg_cluster: Cluster) -> Iterator[str]:
    """The same at the newest schema, as a store opens it."""
    name = pg_cluster.create_database(migrated=True)
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)
