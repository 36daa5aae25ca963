"""The full-text index is filled in batches (app/db/search_index.py), on a real SQLite file.

Every case ends with FTS5's own integrity check, which compares the index with the
messages it covers: a trigger that told FTS5 the wrong values for a delete or a rewrite
corrupts the index, and this is where that shows.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import event

from app.db.store import NewMessage, Store
from app.db.tool_store import search_sessions
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    return store


def _say(store: Store, *texts: str) -> None:
    store.append_messages(
        session_id="s1", lease="L", turn_id=None, messages=[NewMessage("user", t) for t in texts]
    )


def _postgres(store: Store) -> bool:
    return store.engine.dialect.name == "postgresql"


def _pending(store: Store) -> int:
    return int(raw_sql(store, "SELECT count(*) FROM message_fts_pending")[0][0])


def _indexed(store: Store, word: str) -> int:
    if _postgres(store):
        sql = "SELECT count(*) FROM message_search WHERE doc @@ plainto_tsquery('simple', :w)"
    else:
        sql = "SELECT count(*) FROM message_fts WHERE message_fts MATCH :w"
    return int(raw_sql(store, sql, {"w": word})[0][0])


# PostgreSQL's index is whole when every message has exactly the vector its text makes, and
# no vector outlives its message.
_STALE_VECTORS = (
    "SELECT count(*) FROM message m FULL JOIN message_search f ON f.id = m.id "
    "WHERE f.doc IS DISTINCT FROM "
    "to_tsvector('simple', coalesce(m.content, '') || ' ' || coalesce(m.api_content, ''))"
)


def _whole(store: Store) -> None:
    """The index holds exactly what the messages say (FTS5's integrity check; on
    PostgreSQL, each message's vector made afresh from its text)."""
    assert _pending(store) == 0
    if _postgres(store):
        assert raw_sql(store, _STALE_VECTORS) == [(0,)]
    else:
        raw_sql(store, "INSERT INTO message_fts(message_fts) VALUES ('integrity-check')")


def _found(store: Store, word: str) -> list[str]:
    return [m.content or "" for m in store.search_messages(session_id="s1", query=word)]


def test_a_new_message_waits_for_the_batch_and_a_search_catches_up(store: Store) -> None:
    _say(store, "the zebra crossing", "a quiet lane")
    assert _pending(store) == 2 and _indexed(store, "zebra") == 0
    assert _found(store, "zebra") == ["the zebra crossing"]  # the search indexed it first
    assert _indexed(store, "zebra") == 1
    _whole(store)
    assert store.index_for_search() == 0  # nothing left to do


def test_a_pending_message_rewritten_is_indexed_as_it_then_stands(store: Store) -> None:
    _say(store, "the zebra crossing")
    raw_sql(store, "UPDATE message SET content = 'a giraffe crossing'")
    assert _found(store, "giraffe") == ["a giraffe crossing"]
    assert _found(store, "zebra") == []
    _whole(store)


def test_a_pending_message_deleted_never_reaches_the_index(store: Store) -> None:
    _say(store, "the zebra crossing", "the zebra again")
    raw_sql(store, "DELETE FROM message WHERE content = 'the zebra again'")
    if not _postgres(store):  # on PostgreSQL the catch-up drops what it cannot join
        assert _pending(store) == 1
    assert _found(store, "zebra") == ["the zebra crossing"]
    _whole(store)


def test_an_indexed_message_rewritten_or_deleted_leaves_the_index_whole(store: Store) -> None:
    _say(store, "the zebra crossing", "the okapi path")
    store.index_for_search()
    raw_sql(store, "UPDATE message SET content = 'a giraffe crossing' WHERE content LIKE '%zebra%'")
    raw_sql(store, "DELETE FROM message WHERE content = 'the okapi path'")
    if not _postgres(store):  # FTS5 is told at once; PostgreSQL notes the rewrite pending
        assert _pending(store) == 0
    assert _found(store, "giraffe") == ["a giraffe crossing"]
    assert _found(store, "zebra") == [] and _found(store, "okapi") == []
    _whole(store)
    # A flag flip (a compaction) is no index work at all.
    store.index_for_search()
    raw_sql(store, "UPDATE message SET active = FALSE, compacted = TRUE")
    assert _pending(store) == 0
    _whole(store)


def test_search_sessions_finds_what_was_said_a_moment_ago(store: Store) -> None:
    _say(store, "deploy the kumquat service")
    hits = search_sessions(store, owner="k1", end_user=None, terms=["kumquat"], limit=5)
    assert [(h.session_id, h.snippet) for h in hits] == [("s1", "deploy the **kumquat** service")]
    assert (
        search_sessions(store, owner="someone-else", end_user=None, terms=["kumquat"], limit=5)
        == []
    )
    _whole(store)


def test_a_search_on_the_event_loop_is_refused() -> None:
    """It would wait on the writer thread with every stream stalled behind it."""

    async def on_loop(store: Store) -> None:
        with pytest.raises(RuntimeError, match="event loop"):
            store.searchable()

    store = Store.open(Path(":memory:"))
    try:
        asyncio.run(on_loop(store))
    finally:
        store.close()


def test_the_index_keeper_batches_and_rests(store: Store) -> None:
    """In the background: new messages are indexed within a few intervals, and with
    nothing new the keeper commits nothing (its own commit does not wake it again)."""
    commits: list[int] = []
    event.listen(store.engine, "commit", lambda _conn: commits.append(1))

    async def run() -> tuple[int, int]:
        keeper = asyncio.create_task(store.keep_search_index(0.02))
        try:
            _say(store, "the zebra crossing")
            for _ in range(500):  # up to 10 s on a crowded machine; normally a few ticks
                if _pending(store) == 0:
                    break
                await asyncio.sleep(0.02)
            indexed_after = len(commits)
            await asyncio.sleep(0.3)  # some fifteen intervals with nothing new
            return indexed_after, len(commits)
        finally:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)

    indexed_after, later = asyncio.run(run())
    assert _indexed(store, "zebra") == 1
    assert later == indexed_after
    _whole(store)


def test_an_index_of_per_insert_triggers_is_taken_over(tmp_path: Path) -> None:
    """A database from before the batches: its triggers are replaced at startup and what
    they indexed stays whole."""
    path = tmp_path / "old.db"
    store = Store.open(path)
    store.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    store.close()
    owner = "(SELECT hex(owner) FROM session WHERE id = new.session_id)"
    with sqlite3.connect(path) as db:  # the triggers as the previous release made them
        db.execute("DROP TABLE alembic_version")  # that release kept no schema version
        db.execute("DROP TRIGGER message_fts_ai")
        db.execute(
            "CREATE TRIGGER message_fts_ai AFTER INSERT ON message BEGIN "
            "INSERT INTO message_fts(rowid, content, api_content, owner_tag) "
            f"VALUES (new.id, new.content, new.api_content, {owner}); END"
        )
        db.execute("DROP TABLE message_fts_pending")
        db.execute(
            "INSERT INTO message (session_id, role, content, is_error, active, compacted,"
            " created_at) VALUES ('s1', 'user', 'the zebra crossing', 0, 1, 0, 0)"
        )
    store = Store.open(path)
    try:
        assert _pending(store) == 0 and _indexed(store, "zebra") == 1
        assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
        _say(store, "a giraffe")
        assert _pending(store) == 1
        assert _found(store, "giraffe") == ["a giraffe"]
        assert _found(store, "zebra") == ["the zebra crossing"]
        _whole(store)
    finally:
        store.close()
