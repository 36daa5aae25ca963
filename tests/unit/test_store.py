"""The store on a real SQLite file: fencing, ordering, FTS sync, roll-ups."""

from __future__ import annotations

import dataclasses
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from app.db.models import SessionRow
from app.db.store import LeaseLost, NewMessage, Store
from tests.support.ledger import api_call
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    return store


def test_schema_creation_is_idempotent(tmp_path: Path) -> None:
    Store.open(tmp_path / "c.db").close()
    Store.open(tmp_path / "c.db").close()
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_appends_are_fenced_by_the_lease(store: Store) -> None:
    with pytest.raises(LeaseLost):
        store.append_messages(
            session_id="s1", lease="nope", turn_id=None, messages=[NewMessage("user", "x")]
        )
    assert store.acquire_lease(session_id="s1", lease="L1", ttl_s=60)
    assert not store.acquire_lease(session_id="s1", lease="L2", ttl_s=60)
    store.append_messages(
        session_id="s1", lease="L1", turn_id=None, messages=[NewMessage("user", "a")]
    )
    store.release_lease(session_id="s1", lease="L1")
    with pytest.raises(LeaseLost):
        store.append_messages(
            session_id="s1", lease="L1", turn_id=None, messages=[NewMessage("user", "b")]
        )
    assert [m.content for m in store.active_messages(session_id="s1")] == ["a"]


def test_expired_lease_can_be_taken_over(store: Store) -> None:
    assert store.acquire_lease(session_id="s1", lease="old", ttl_s=-1)
    assert store.acquire_lease(session_id="s1", lease="new", ttl_s=60)
    with pytest.raises(LeaseLost):
        store.append_messages(
            session_id="s1", lease="old", turn_id=None, messages=[NewMessage("user", "x")]
        )


def test_messages_keep_insertion_order_and_tool_calls(store: Store) -> None:
    store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    calls = [{"id": "c1", "name": "read_file", "arguments": '{"path": "a"}'}]
    store.append_messages(
        session_id="s1",
        lease="L",
        turn_id="t1",
        messages=[
            NewMessage("user", "hi"),
            NewMessage("assistant", None, tool_calls=calls),
            NewMessage("tool", "contents", tool_call_id="c1", tool_name="read_file"),
        ],
    )
    rows = store.active_messages(session_id="s1")
    assert [r.role for r in rows] == ["user", "assistant", "tool"]
    assert rows[1].tool_calls == tuple(calls)
    assert rows[0].id < rows[1].id < rows[2].id


def test_full_text_search_follows_text_changes_only(store: Store) -> None:
    store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    store.append_messages(
        session_id="s1",
        lease="L",
        turn_id=None,
        messages=[NewMessage("user", "the zebra crossing")],
    )
    assert [m.content for m in store.search_messages(session_id="s1", query="zebra")] == [
        "the zebra crossing"
    ]
    raw_sql(store, "UPDATE message SET active = FALSE, compacted = TRUE")
    # A compacted row stays searchable; a retracted one does not.
    assert store.search_messages(session_id="s1", query="zebra")
    raw_sql(store, "UPDATE message SET compacted = FALSE")
    raw_sql(store, "UPDATE message SET content = 'a giraffe'")
    raw_sql(store, "UPDATE message SET active = TRUE")
    assert not store.search_messages(session_id="s1", query="zebra")
    assert store.search_messages(session_id="s1", query="giraffe")


def test_api_calls_roll_up_into_the_session(store: Store) -> None:
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call("0.25"))
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call(None))
    session = store.get_session(session_id="s1")
    assert session is not None
    assert (session.input_tokens, session.cache_read_tokens, session.upstream_calls) == (20, 200, 2)
    assert Decimal(session.cost_usd) == Decimal("0.25")
    assert session.cost_unknown_calls == 1
    rows, total = store.api_calls(session_id="s1", limit=1, offset=1)
    assert total == 2 and rows[0].cost_usd is None
    assert store.spent_by_owner(owner="k1") == (Decimal("0.25"), 1)


def test_an_older_database_gains_new_columns(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.execute(
        "CREATE TABLE session (id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL, "
        "profile VARCHAR NOT NULL, system_prompt VARCHAR NOT NULL)"
    )
    con.execute("INSERT INTO session VALUES ('s_old', 'k', 'courier', 'sys')")
    con.commit()
    con.close()
    store = Store.open(db)
    session = store.get_session(session_id="s_old")
    assert session is not None
    assert session.compactions == 0 and session.tool_snapshot == "[]"
    assert session.verdict_pending is False and session.anchor_rough is None


def test_an_index_no_query_reads_is_dropped_from_an_older_database(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    Store.open(db).close()
    con = sqlite3.connect(db)
    con.execute('CREATE INDEX "ix_api_call_turn_id" ON api_call (turn_id)')  # as releases made it
    con.execute("DROP TABLE alembic_version")  # and they kept no schema version
    con.commit()
    con.close()
    store = Store.open(db)
    store.close()
    con = sqlite3.connect(db)
    indexes = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    con.close()
    assert "ix_api_call_turn_id" not in indexes
    assert {"ix_api_call_session_id", "ix_api_call_owner_end_user", "ix_api_call_created_at"} <= (
        indexes
    )


def test_bulk_paths_round_trip_every_field(tmp_path: Path) -> None:
    # create_session inserts and active_messages reads with Core statements (for speed);
    # they must agree with the ORM paths on every column, including ones added later.
    from app.db.models import MessageRow
    from app.db.store import records

    columns = set(MessageRow.__table__.columns.keys())
    values = records.message_values(NewMessage(role="user"), session_id="s", turn_id=None)
    assert set(values) == columns - {"id"}
    s = Store.open(tmp_path / "rt.db")
    full = NewMessage(
        role="assistant",
        content="c",
        api_content="a",
        tool_calls=[{"id": "t1", "name": "n", "arguments": "{}"}],
        tool_call_id="x",
        tool_name="n",
        is_error=True,
        reasoning="r",
        kind="summary",
        images=("k1", "k2"),
    )
    s.create_session(
        session_id="bulk", owner="o", profile="courier", system_prompt="p", lease="L",
        lease_ttl_s=60, messages=[full],
    )  # fmt: skip
    s.create_session(session_id="orm", owner="o", profile="courier", system_prompt="p")
    assert s.acquire_lease(session_id="orm", lease="L", ttl_s=60)
    s.append_messages(session_id="orm", lease="L", turn_id=None, messages=[full])
    bulk, orm = s.active_messages(session_id="bulk"), s.active_messages(session_id="orm")
    assert [m.as_new() for m in bulk] == [m.as_new() for m in orm]
    assert bulk[0].as_new() == dataclasses.replace(full, reasoning=None)
    via_orm = s.get_message(session_id="bulk", message_id=bulk[0].id)
    assert via_orm is not None and via_orm.as_new() == bulk[0].as_new()
    s.close()
    con = sqlite3.connect(tmp_path / "rt.db")
    rows = con.execute("SELECT reasoning, active, compacted FROM message ORDER BY id").fetchall()
    con.close()
    assert rows == [("r", 1, 0), ("r", 1, 0)]


def test_the_writer_thread_keeps_one_connection_and_drops_a_failed_one(tmp_path: Path) -> None:
    import asyncio
    import threading

    from sqlalchemy import event

    store = Store.open(tmp_path / "c.db")
    checkouts: list[str] = []
    event.listen(
        store.engine.pool, "checkout", lambda *_: checkouts.append(threading.current_thread().name)
    )

    def create(n: int) -> None:
        with store.unit():
            store.create_session(session_id=f"s{n}", owner="k", profile="courier", system_prompt="")

    def fail() -> None:
        with store.unit():
            store.create_session(session_id="lost", owner="k", profile="courier", system_prompt="")
            raise RuntimeError("the unit fails after its write")

    async def run() -> None:
        for n in range(5):
            await store.off_loop(lambda n=n: create(n))
        with pytest.raises(RuntimeError):
            await store.off_loop(fail)
        await store.off_loop(lambda: create(5))

    asyncio.run(run())
    writer = [name for name in checkouts if name.startswith("courier-store")]
    # One connection for the five units, a fresh one after the failed unit dropped it.
    assert len(writer) == 2, checkouts
    assert store.get_session(session_id="lost") is None
    assert all(store.get_session(session_id=f"s{n}") is not None for n in range(6))
    store.close()
    assert store.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    store.close()  # twice is harmless


def test_a_units_first_fenced_update_is_its_fence_too(store: Store) -> None:
    from sqlalchemy.dialects import postgresql

    from app.db.raw import count_statements
    from app.db.turn_sql import session_update

    assert store.acquire_lease(session_id="s1", lease="L1", ttl_s=60)
    before = store.get_session(session_id="s1")
    assert before is not None
    with pytest.raises(LeaseLost):
        store.update_session(session_id="s1", lease="nope", anchor_billed=5)
    unchanged = store.get_session(session_id="s1")
    assert unchanged is not None and unchanged.anchor_billed == before.anchor_billed
    statements: list[int] = []
    count_statements(store.engine, lambda: statements.append(1))
    with store.unit():
        store.update_session(session_id="s1", lease="L1", anchor_billed=7)
        store.append_messages(
            session_id="s1", lease="L1", turn_id=None, messages=[NewMessage("user", "a")]
        )
    # The update (fence included) and the message insert: no separate fence statement.
    assert len(statements) == 2, statements
    after = store.get_session(session_id="s1")
    assert after is not None and after.anchor_billed == 7
    assert after.updated_at > before.updated_at
    # The fenced form is one of the hot statements, so it must compile for PostgreSQL too.
    sql, _ = session_update(("anchor_billed",), fenced=True)._for(postgresql.dialect())
    assert "lease = %(lease)s" in sql and "updated_at = %(now)s" in sql


def test_an_index_key_without_a_row_id_takes_the_sessions_newest(store: Store) -> None:
    """The turn's closing key reads the newest message row inside its own insert (one
    statement); a key that names its row keeps it."""
    from app.db.chat_store import TranscriptKey, find_continuations, index_transcript

    store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    store.append_messages(
        session_id="s1",
        lease="L",
        turn_id=None,
        messages=[NewMessage("user", "a"), NewMessage("assistant", "b")],
    )
    newest = max(m.id for m in store.active_messages(session_id="s1"))
    keys = [TranscriptKey("h-named", 1, 1), TranscriptKey("h-newest", 2, None)]
    index_transcript(store, session_id="s1", keys=keys, head="h-newest", length=2)
    found = find_continuations(store, hashes=["h-named", "h-newest"])
    assert [(c.position, c.last_row_id) for c in found] == [(2, newest), (1, 1)]
    assert newest > 1


def test_a_new_sessions_insert_carries_its_transcript_head(tmp_path: Path) -> None:
    """The opening writes a new session's head in its insert and indexes the keys without
    moving it again; the keys still find the session."""
    from app.db.chat_store import TranscriptKey, find_continuations, index_transcript

    store = Store.open(tmp_path / "courier.db")
    store.create_session(
        session_id="s2",
        owner="o",
        profile="p",
        system_prompt="x",
        lease="L",
        lease_ttl_s=60,
        transcript=("h-2", 2),
    )
    row = store.get_session(session_id="s2")
    assert row is not None and (row.transcript_head, row.transcript_len) == ("h-2", 2)
    keys = [TranscriptKey("h-1", 1, None), TranscriptKey("h-2", 2, None)]
    index_transcript(store, session_id="s2", keys=keys, head="h-2", length=2, move_head=False)
    assert [c.position for c in find_continuations(store, hashes=["h-1", "h-2"])] == [2, 1]
    store.close()


def test_the_closing_release_moves_the_transcript_head_in_the_same_statement(
    tmp_path: Path,
) -> None:
    store = Store.open(tmp_path / "courier.db")
    store.create_session(
        session_id="s3", owner="o", profile="p", system_prompt="x", lease="L", lease_ttl_s=60
    )
    store.start_turn(session_id="s3", lease="L", turn_id="t1")

    def close(head: str, length: int) -> SessionRow:
        store.close_turn(
            session_id="s3",
            lease="L",
            turn_id="t1",
            exit_reason="completed",
            iterations=1,
            transcript=(head, length),
        )
        row = store.get_session(session_id="s3")
        assert row is not None
        assert (row.transcript_head, row.transcript_len) == (head, length)
        return row

    row = close("h-1", 1)
    assert (row.lease, row.lease_expires_at) == (None, None)
    # A turn whose lease was taken over releases nothing, and still moves the head, as the
    # head's own statement did before it rode in the release.
    assert store.acquire_lease(session_id="s3", lease="M", ttl_s=60)
    row = close("h-2", 2)
    assert row.lease == "M" and row.lease_expires_at is not None
    store.close()


def test_a_long_append_is_one_executemany_and_returns_its_ids_in_order(store: Store) -> None:
    from app.db.raw import count_statements
    from app.db.store.messages import BULK_ROWS

    store.create_session(session_id="s2", owner="o", profile="p", system_prompt="x")
    for sid in ("s1", "s2"):
        assert store.acquire_lease(session_id=sid, lease=f"L{sid}", ttl_s=60)
    store.append_messages(
        session_id="s2", lease="Ls2", turn_id=None, messages=[NewMessage("user", "other")]
    )
    statements: list[int] = []
    count_statements(store.engine, lambda: statements.append(1))
    rows = [NewMessage("user" if i % 2 else "assistant", f"m{i}") for i in range(10 * BULK_ROWS)]
    ids = store.append_messages(session_id="s1", lease="Ls1", turn_id=None, messages=rows)
    # The fence, the newest id before, one executemany, the ids after: not one per row.
    assert len(statements) == 4, statements
    store.append_messages(
        session_id="s2", lease="Ls2", turn_id=None, messages=[NewMessage("user", "more")]
    )
    stored = store.active_messages(session_id="s1")
    assert ids == [m.id for m in stored]
    assert [m.content for m in stored] == [r.content for r in rows]
    assert ids == sorted(ids)
    short = store.append_messages(
        session_id="s1", lease="Ls1", turn_id=None, messages=rows[: BULK_ROWS - 1]
    )
    assert short == [m.id for m in store.active_messages(session_id="s1")][-(BULK_ROWS - 1) :]
