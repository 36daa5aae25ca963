"""The lease holder's session row, kept in memory (app/db/leased_rows.py), on a real SQLite
file: it follows every write of the holder without a read, is dropped by whatever else
rewrites the row, and a stale copy can never cost a roll-up its money."""

from __future__ import annotations

import asyncio
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from app.db.chat_store import TranscriptKey, index_transcript
from app.db.leased_rows import LeasedRows
from app.db.models import SessionRow
from app.db.raw import count_statements
from app.db.store import LeaseLost, NewMessage, Store
from tests.support.ledger import api_call
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""


@pytest.fixture(autouse=True)
def _unverified(monkeypatch: pytest.MonkeyPatch) -> None:
    # Verification off (before any store opens): it reads the row on every call, which
    # these tests count.
    monkeypatch.setenv("COURIER_VERIFY_LIVE_LOG", "0")


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    return store


def _reads(store: Store) -> list[int]:
    counted: list[int] = []
    count_statements(store.engine, lambda: counted.append(1))
    return counted


def _stored(store: Store) -> dict[str, object]:
    row = store.get_session(session_id="s1")
    assert row is not None
    return row.model_dump()


def _kept(store: Store) -> SessionRow:
    statements = _reads(store)
    row = store.leased_row(session_id="s1")
    assert row is not None
    assert statements == [], "the kept row was read from the database"
    return row


def test_the_holders_row_follows_each_of_its_writes_without_a_read(store: Store) -> None:
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    assert _kept(store).model_dump() == _stored(store)
    store.set_tool_snapshot(session_id="s1", lease="L", snapshot='[{"n": 1}]', reason="tools")
    assert _kept(store).model_dump() == _stored(store)
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call("0.25"))
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call(None))
    store.update_session(session_id="s1", lease="L", anchor_billed=7, anchor_rough=6)
    store.set_client_context(
        session_id="s1", lease="L", values={"client_tools": "[1]"}, cache_break="client"
    )
    store.append_messages(
        session_id="s1", lease="L", turn_id=None, messages=[NewMessage("user", "hi")]
    )
    index_transcript(
        store, session_id="s1", keys=[TranscriptKey("h1", 1, None)], head="h1", length=1
    )
    assert store.renew_lease(session_id="s1", lease="L", ttl_s=120)
    kept = _kept(store)
    assert kept.model_dump() == _stored(store)
    assert (kept.upstream_calls, kept.cost_unknown_calls, kept.cost_usd) == (2, 1, "0.25")
    assert (kept.anchor_billed, kept.transcript_head, kept.pending_cache_break) == (
        7,
        "h1",
        "client",
    )


def test_a_roll_up_clears_the_cache_break_it_paid_for(store: Store) -> None:
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    store.set_tool_snapshot(session_id="s1", lease="L", snapshot="[]", reason="tools")
    call = api_call("0.1", cache_break="other")
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=call)
    assert _kept(store).pending_cache_break == "tools" == _stored(store)["pending_cache_break"]
    call = api_call("0.1", cache_break="tools")
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=call)
    assert _kept(store).pending_cache_break is None
    assert _kept(store).model_dump() == _stored(store)


def test_a_stale_kept_cost_still_adds_to_the_stored_one(store: Store) -> None:
    """Something outside the store changed the cost while the row was kept (an operator's
    correction, another process): the roll-up's compare-and-set misses, reads the stored
    cost and adds to it, so no money is lost or invented."""
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    raw_sql(store, "UPDATE session SET cost_usd = '1.5' WHERE id = 's1'")
    store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call("0.25"))
    assert Decimal(str(_stored(store)["cost_usd"])) == Decimal("1.75")
    assert store.spent_by_owner(owner="k1") == (Decimal("0.25"), 0)


def test_deferred_writes_show_in_the_kept_row_before_and_after_they_commit(
    store: Store,
) -> None:
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)

    async def turn() -> tuple[SessionRow, dict[str, object], SessionRow]:
        # On the event loop both writes are deferred: nothing has committed yet.
        store.record_api_call(session_id="s1", owner="k1", turn_id="t", call=api_call("0.5"))
        store.update_session(session_id="s1", lease="L", anchor_billed=9)
        queued = _kept(store)
        pending = _stored(store)  # the stored row with the queue's effect applied
        await store.commit_off_loop(lambda: None)
        return queued, pending, _kept(store)

    queued, pending, committed = asyncio.run(turn())
    assert queued.model_dump() == pending
    assert (queued.cost_usd, queued.anchor_billed, queued.upstream_calls) == ("0.5", 9, 1)
    # The carried update was also the unit's fence: its `updated_at` is in the kept row.
    assert committed.model_dump() == _stored(store)
    assert committed.updated_at > queued.updated_at


def test_a_new_leased_session_is_kept_from_its_insert(store: Store) -> None:
    store.create_session(
        session_id="s2", owner="k1", profile="courier", system_prompt="p", lease="L2"
    )
    statements = _reads(store)
    kept = store.leased_row(session_id="s2")
    assert statements == []
    fresh = store.get_session(session_id="s2")
    assert kept is not None and fresh is not None and kept.model_dump() == fresh.model_dump()


def test_the_row_is_dropped_wherever_its_holder_is_not_the_only_writer(store: Store) -> None:
    def read_back() -> int:
        statements = _reads(store)
        assert store.leased_row(session_id="s1") is not None
        return len(statements)

    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    assert read_back() == 0
    store.release_lease(session_id="s1", lease="L")
    assert read_back() == 1
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    store.rewrite_live(
        session_id="s1", lease="L", archive_ids=[], insert=[], session_updates={"compactions": 1}
    )
    assert read_back() == 1
    store.release_lease(session_id="s1", lease="L")
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    store.forget_live("s1")  # what every other module's rewrite of the session's rows calls
    assert read_back() == 1
    store.release_lease(session_id="s1", lease="L")
    assert store.acquire_lease(session_id="s1", lease="L2", ttl_s=60)
    with pytest.raises(RuntimeError), store.unit():
        store.update_session(session_id="s1", lease="L2", anchor_billed=1)
        raise RuntimeError("the unit fails after the write")
    assert read_back() == 1
    assert store.get_session(session_id="s1").anchor_billed is None  # type: ignore[union-attr]
    store.release_lease(session_id="s1", lease="L2")
    assert store.acquire_lease(session_id="s1", lease="L3", ttl_s=60)
    store.close_turn(session_id="s1", lease="L3", turn_id="t", exit_reason="done", iterations=1)
    assert read_back() == 1


def test_the_row_handed_out_is_a_copy(store: Store) -> None:
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    first = store.leased_row(session_id="s1")
    assert first is not None
    first.system_prompt = "changed by a caller"
    again = store.leased_row(session_id="s1")
    assert again is not None and again.system_prompt == "sys"


def test_a_lease_taken_away_is_found_by_the_next_write_not_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With verification on, a kept row whose lease another process took is not a drift:
    the holder's next fenced write reports the loss, and the row is dropped."""
    monkeypatch.setenv("COURIER_VERIFY_LIVE_LOG", "1")
    mine = Store.open(tmp_path / "c.db")
    mine.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    assert mine.acquire_lease(session_id="s1", lease="L", ttl_s=-1)
    other = Store.open(tmp_path / "c.db")
    assert other.acquire_lease(session_id="s1", lease="theirs", ttl_s=60)
    kept = mine.leased_row(session_id="s1")
    assert kept is not None and kept.lease == "L"
    with pytest.raises(LeaseLost):
        mine.update_session(session_id="s1", lease="L", anchor_billed=3)
    fresh = mine.leased_row(session_id="s1")
    assert fresh is not None and fresh.lease == "theirs"
    other.close()
    mine.close()


def test_verification_names_a_drifted_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURIER_VERIFY_LIVE_LOG", "1")
    store = Store.open(tmp_path / "c.db")
    store.create_session(session_id="s1", owner="k1", profile="courier", system_prompt="sys")
    assert store.acquire_lease(session_id="s1", lease="L", ttl_s=60)
    with sqlite3.connect(tmp_path / "c.db") as other:
        other.execute("UPDATE session SET compactions = 4 WHERE id = 's1'")
    with pytest.raises(AssertionError, match="compactions"):
        store.leased_row(session_id="s1")
    store.close()


def test_the_kept_rows_are_bounded(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "c.db")
    rows = LeasedRows(limit=2)
    for sid in ("a", "b", "c"):
        store.create_session(session_id=sid, owner="k", profile="courier", system_prompt="p")
        found = store.get_session(session_id=sid)
        assert found is not None
        rows.keep(found)
    assert "a" not in rows and "b" in rows and "c" in rows
    store.close()


def test_the_lease_and_roll_up_statements_compile_for_postgresql() -> None:
    from sqlalchemy.dialects import postgresql

    from app.db.turn_sql import ROLLUP, TAKE_LEASE

    take, _ = TAKE_LEASE._for(postgresql.dialect())
    assert "RETURNING" in take and '"cost_usd"' in take
    roll, _ = ROLLUP._for(postgresql.dialect())
    assert "cost_usd = %(old)s" in roll
