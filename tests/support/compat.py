"""One pair of live servers (OpenAI wire, Anthropic wire) shared by the issue-9 client suites.

A server start costs seconds on a loaded 2-core CI machine; the compatibility replay, the
SDK tests, the docs snippets and the behaviour tests all need the same two, so they share
them for the whole session (registered in tests/conftest.py). Settings cover every suite:
vendor model names are served (captured clients send `gpt-4.1` etc.), a second principal
exists (admin key), and one browser origin is allowed. No shared workspace: each session
gets its own, which is what the continuity tests rely on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.db.migrations import runner
from tests.support.postgres import Cluster
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

OTHER_KEY = "other-principal-key-0123456789"
"""A second principal's key (configured as the admin key)."""
ORIGIN = "https://cockpit.example"
"""The one origin on the CORS allowlist."""


@pytest.fixture(scope="session")
def compat_servers(
    simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    servers = ServerFactory(simulator, tmp_path_factory)
    try:
        yield {wire: _compat_server(servers, wire) for wire in ("openai", "anthropic")}
    finally:
        servers.stop_all()


@pytest.fixture(scope="session")
def compat_servers_postgres(
    simulator: Simulator, tmp_path_factory: pytest.TempPathFactory, pg_cluster: Cluster
) -> Iterator[dict[str, Server]]:
    """The same pair, each on a PostgreSQL database of its own (issue 32: the captured
    client requests replay identically on PostgreSQL)."""
    servers = ServerFactory(simulator, tmp_path_factory)
    databases = [pg_cluster.create_database() for _ in range(2)]
    try:
        pair = {
            wire: _compat_server(servers, wire, COURIER_DATABASE_URL=pg_cluster.url(database))
            for wire, database in zip(("openai", "anthropic"), databases, strict=True)
        }
        for database in databases:  # each server made its schema there, not in a SQLite file
            assert pg_cluster.schema_revision(database) == runner.head()
        yield pair
    finally:
        servers.stop_all()
        for database in databases:
            pg_cluster.drop_database(database)


def _compat_server(servers: ServerFactory, wire: str, **env: str) -> Server:
    return servers(
        wire,
        COURIER_ACCEPT_ANY_MODEL="true",
        COURIER_ADMIN_API_KEY=OTHER_KEY,
        COURIER_CORS_ORIGINS=json.dumps([ORIGIN]),
        **env,
    )


def unmarked(value: Any) -> Any:
    """`value` without `cache_control` markers: breakpoints move forward each turn by
    design, and the provider's cache key ignores them; every other byte must match."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value
