"""Paging a key's sessions by cursor, in-process on a real SQLite file: the order, the
cursor's scope, and the plan SQLite runs (the owner's index, no sort of every session)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event

from app.db import session_query as q
from app.db.operator_store import OperatorStore, UnknownSession
from app.db.store import Store
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

OWNER = "fp-owner"
OTHER = "fp-other"


def _sessions(store: Store, specs: list[tuple[str, str, str, float]]) -> None:
    """(id, owner, end user, started_at) each; the start time set on the file afterwards."""
    for sid, owner, end_user, _ in specs:
        store.create_session(
            session_id=sid, owner=owner, end_user=end_user, profile="courier", system_prompt="p"
        )
    store.flush()
    raw_sql(
        store,
        "UPDATE session SET started_at = :at WHERE id = :sid",
        [{"at": started, "sid": sid} for sid, _, _, started in specs],
    )


def _pages(store: Store, *, limit: int, **scope: str | None) -> list[list[str]]:
    pages: list[list[str]] = []
    before: str | None = None
    while True:
        rows, more = q.list_sessions(store, limit=limit, before=before, **scope)  # type: ignore[arg-type]
        pages.append([r.session.id for r in rows])
        if not more:
            return pages
        before = rows[-1].session.id


def test_sessions_sharing_a_start_time_page_without_repeat_or_gap(store: Store) -> None:
    # Seven sessions in two instants (ids out of insertion order), plus another owner's
    # between them: every page boundary falls inside a tie at some limit.
    specs = [(f"s{n}", OWNER, "", 100.0 if n % 2 else 200.0) for n in (5, 2, 7, 1, 4, 6, 3)]
    _sessions(store, [*specs, ("s9", OTHER, "", 150.0)])
    expected = ["s6", "s4", "s2", "s7", "s5", "s3", "s1"]  # started_at desc, then id desc
    for limit in range(1, 9):
        pages = _pages(store, limit=limit, owner=OWNER)
        assert [sid for page in pages for sid in page] == expected, limit
        assert all(len(p) == limit for p in pages[:-1])


def test_an_end_users_listing_pages_within_that_end_user(store: Store) -> None:
    specs = [(f"a{n}", OWNER, "alice", float(n)) for n in range(5)]
    specs += [(f"b{n}", OWNER, "bob", float(n) + 0.5) for n in range(5)]
    _sessions(store, specs)
    pages = _pages(store, limit=2, owner=OWNER, end_user="alice")
    assert [sid for page in pages for sid in page] == ["a4", "a3", "a2", "a1", "a0"]


def test_a_cursor_outside_the_listing_is_refused_alike(store: Store) -> None:
    _sessions(
        store,
        [
            ("mine", OWNER, "", 1.0),
            ("mine-alice", OWNER, "alice", 2.0),
            ("theirs", OTHER, "", 3.0),
        ],
    )
    # Another owner's session and a made-up id fail the same way: the cursor cannot tell
    # whether a session exists, nor where it sits among the caller's.
    for cursor in ("theirs", "sess_nope", "", "' OR 1=1 --"):
        with pytest.raises(q.UnknownCursor):
            q.list_sessions(store, owner=OWNER, limit=5, before=cursor)
    # A listing narrowed to one end user takes only that end user's sessions as cursors.
    with pytest.raises(q.UnknownCursor):
        q.list_sessions(store, owner=OWNER, end_user="bob", limit=5, before="mine-alice")
    rows, _ = q.list_sessions(store, owner=OWNER, end_user="alice", limit=5, before="mine-alice")
    assert rows == []
    # The admin's listing spans owners, so any session is a cursor there.
    rows, _ = q.list_sessions(store, owner=None, limit=5, before="theirs")
    assert [r.session.id for r in rows] == ["mine-alice", "mine"]


def _plan(store: Store, sql: str, params: tuple[object, ...]) -> str:
    with sqlite3.connect(store.engine.url.database or "") as db:
        return " | ".join(str(r[3]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, params))


@pytest.mark.sqlite_only  # SQLite's query plans
def test_a_page_walks_the_owners_index_from_its_cursor(store: Store) -> None:
    """The statement the listing runs, as SQLite plans it: the index holds the whole order
    (no temporary B-tree sorting all of an owner's sessions) and the cursor is a row value
    the search seeks to (an OR of two comparisons walks every newer entry instead)."""
    _sessions(store, [(f"s{n}", OWNER, "", float(n)) for n in range(3)])
    seen: list[tuple[str, tuple[object, ...]]] = []

    def keep(conn: object, cursor: object, statement: str, params: object, *_: object) -> None:
        if statement.lstrip().startswith("SELECT session.id, session.owner"):
            seen.append((statement, tuple(params)))  # type: ignore[arg-type]

    event.listen(store.engine, "before_cursor_execute", keep)
    try:
        q.list_sessions(store, owner=OWNER, limit=2, before="s2")
        q.list_sessions(store, owner=OWNER, end_user="", limit=2, before="s2")
    finally:
        event.remove(store.engine, "before_cursor_execute", keep)
    (key_wide, key_args), (one_user, user_args) = seen
    assert "(session.started_at, session.id) < (?, ?)" in key_wide
    plan = _plan(store, key_wide, key_args)
    assert "ix_session_owner_started" in plan and "TEMP B-TREE" not in plan, plan
    assert "(started_at,id)<(?,?)" in plan.replace(" ", ""), plan
    plan = _plan(store, one_user, user_args)
    assert "ix_session_owner_end_user_started" in plan and "TEMP B-TREE" not in plan, plan


@pytest.mark.sqlite_only  # the operator commands read the SQLite file (not on PostgreSQL yet)
def test_the_operators_listing_pages_by_after_too(store: Store) -> None:
    specs = [(f"s{n}", OWNER, "", 100.0 if n % 2 else 200.0) for n in (5, 2, 7, 1, 4, 6, 3)]
    _sessions(store, [*specs, ("t1", OTHER, "", 150.0)])
    operator = OperatorStore(Path(store.engine.url.database or ""))
    try:
        for owner, expected in (
            (OWNER, ["s6", "s4", "s2", "s7", "s5", "s3", "s1"]),
            (None, ["s6", "s4", "s2", "t1", "s7", "s5", "s3", "s1"]),
        ):
            seen: list[str] = []
            after: str | None = None
            while page := operator.sessions(limit=3, owner=owner, after=after):
                seen += [s.id for s in page]
                after = page[-1].id
            assert seen == expected
        for after in ("t1", "sess_nope"):  # the other key's, when listing one key's
            with pytest.raises(UnknownSession):
                operator.sessions(owner=OWNER, after=after)
    finally:
        operator.close()


def test_an_upgraded_database_gets_the_listings_indexes(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    Store.open(path).close()
    with sqlite3.connect(path) as db:  # the indexes as the previous release left them
        db.execute("DROP TABLE alembic_version")  # that release kept no schema version
        db.execute("DROP INDEX ix_session_owner_started")
        db.execute("DROP INDEX ix_session_owner_end_user_started")
        db.execute(
            "CREATE INDEX ix_session_owner_end_user ON session (owner, end_user, started_at)"
        )
    Store.open(path).close()
    with sqlite3.connect(path) as db:
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"ix_session_owner_started", "ix_session_owner_end_user_started"} <= names
    assert "ix_session_owner_end_user" not in names  # its place taken, it only cost inserts
