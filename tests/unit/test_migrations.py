"""The schema through Alembic on both backends (app/db/migrations/).

A database at the newest revision matches the models exactly, so a model change that
ships without its revision fails here; a SQLite file made before the migrations is adopted
with its rows; a schema newer than the code is refused with what to do; two processes
migrating one empty database at once both succeed and only one creates the tables.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, text
from sqlmodel import SQLModel

from app.db import search_index
from app.db.database import Target, open_engine
from app.db.migrations import runner
from app.db.migrations.runner import SchemaNotCurrent, SchemaTooNew
from app.db.store import Store
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS


def _differences(engine: Engine, metadata: MetaData) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_object": runner.include_object}
        )
        return list(compare_metadata(context, metadata))


@pytest.fixture
def engine(backend_target: Target) -> Engine:
    made = open_engine(backend_target)
    yield made  # type: ignore[misc]
    made.dispose()


def test_an_empty_database_is_brought_to_head_and_matches_the_models(engine: Engine) -> None:
    assert runner.upgrade(engine) == ("empty", "current")
    assert _differences(engine, SQLModel.metadata) == []


def test_the_comparison_sees_a_column_no_revision_made(engine: Engine) -> None:
    """The test above can fail: a model with one more column than the revisions made."""
    runner.upgrade(engine)
    changed = MetaData()
    for table in SQLModel.metadata.sorted_tables:
        table.to_metadata(changed)
    changed.tables["turn"].append_column(Column("added_later", Integer))
    assert [d[0] for d in _differences(engine, changed)] == ["add_column"]


def test_migrating_a_current_database_changes_nothing(engine: Engine) -> None:
    runner.upgrade(engine)
    assert runner.upgrade(engine) == ("current", "current")
    runner.check(engine)


def test_a_server_that_may_not_migrate_refuses_an_empty_database(engine: Engine) -> None:
    with pytest.raises(SchemaNotCurrent, match="run `courier migrate`"):
        runner.check(engine)


def test_a_schema_newer_than_the_code_is_refused_with_what_to_do(
    engine: Engine, backend_target: Target
) -> None:
    runner.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    for refusal in (lambda: runner.upgrade(engine), lambda: runner.check(engine)):
        with pytest.raises(SchemaTooNew) as refused:
            refusal()
        assert "revision 9999, newer than this Courier" in str(refused.value)
        assert "upgrade Courier" in str(refused.value)
    with pytest.raises(SchemaTooNew):
        Store.open(backend_target)
    with engine.connect() as conn:  # refused, not rewritten
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "9999"


def test_two_migrating_at_once_both_succeed_and_one_creates(backend_target: Target) -> None:
    engines = [open_engine(backend_target), open_engine(backend_target)]
    results: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def migrate(engine: Engine) -> None:
        start.wait()
        try:
            results.append(runner.upgrade(engine))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == [("current", "current"), ("empty", "current")]
    assert _differences(engines[0], SQLModel.metadata) == []
    for engine in engines:
        engine.dispose()


def _pre_migration_sqlite(path: Path) -> None:
    """A data directory as Courier made it before the migrations: the tables by
    `create_all` (the baseline's), the FTS5 index, no alembic_version; and a session of
    an older release: `session` without a column, `api_call` without an index that later
    releases added."""
    from app.db.migrations.versions.r0001_baseline import BASELINE

    engine = open_engine(path)
    with engine.begin() as conn:
        BASELINE.create_all(conn)
        search_index.install(conn)
    engine.dispose()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX ix_api_call_owner_end_user")
    db.execute("ALTER TABLE session DROP COLUMN client_tools")
    db.execute(
        "INSERT INTO session (id, owner, profile, system_prompt, tool_snapshot, "
        "transcript_len, client_instructions, verdict_pending, compaction_strikes, "
        "fallback_streak, summary_cooldown_until, compactions, started_at, updated_at, "
        "input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
        "reasoning_tokens, cost_usd, cost_unknown_calls, upstream_calls) VALUES "
        "('s1', 'o', 'p', 'sys', '[]', 0, '[]', 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, "
        "'0', 0, 0)"
    )
    db.execute(
        "INSERT INTO message (session_id, role, content, is_error, active, compacted, "
        "created_at) VALUES ('s1', 'user', 'kept across the adoption', 0, 1, 0, 1)"
    )
    db.commit()
    db.close()


def test_a_sqlite_file_from_before_the_migrations_is_adopted_with_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "courier.db"
    _pre_migration_sqlite(path)
    engine = open_engine(path)
    assert runner.upgrade(engine) == ("legacy", "current")
    assert _differences(engine, SQLModel.metadata) == []
    engine.dispose()
    store = Store.open(path)
    try:
        assert [m.content for m in store.active_messages(session_id="s1")] == [
            "kept across the adoption"
        ]
        session = store.get_session(session_id="s1")
        assert session is not None and session.client_tools == "[]"  # added, at its default
        found = store.search_messages(session_id="s1", query="adoption")
        assert [m.content for m in found] == ["kept across the adoption"]
    finally:
        store.close()


def test_a_sqlite_file_made_between_issue_33_and_the_migrations_is_adopted(
    tmp_path: Path,
) -> None:
    """Such a build made issue 33's tables and columns by `create_all` and start-up steps:
    the file has them but no version, and revision 0002 must not make them twice."""
    path = tmp_path / "courier.db"
    engine = open_engine(path)
    with engine.begin() as conn:
        SQLModel.metadata.create_all(conn)  # the models as that build had them
        search_index.install(conn)
    assert runner.upgrade(engine) == ("legacy", "current")
    assert _differences(engine, SQLModel.metadata) == []
    engine.dispose()
