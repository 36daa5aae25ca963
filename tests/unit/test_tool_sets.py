"""Tool snapshots stored once per distinct set (app/db/tool_sets.py), on a real SQLite file:
rows hold a reference, every read hands out the JSON, rows written before keep working,
and a rolled-back set is never taken for stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlmodel import Session

from app.db import tool_sets
from app.db.models import SessionRow
from app.db.raw import count_statements
from app.db.store import PersistenceError, Store
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

SPECS = json.dumps(
    [{"name": f"tool_{i}", "description": "d" * 700, "parameters": {}} for i in range(8)],
    separators=(",", ":"),
)


def _create(store: Store, session_id: str, specs: str = SPECS, lease: str | None = None) -> None:
    store.create_session(
        session_id=session_id,
        owner="k1",
        profile="courier",
        system_prompt="sys",
        tool_snapshot=specs,
        lease=lease,
        lease_ttl_s=60 if lease else 0,
    )


def _read(store: Store, session_id: str) -> str:
    """The snapshot a read of the session hands out."""
    row = store.get_session(session_id=session_id)
    assert row is not None
    return row.tool_snapshot


def _raw(store: Store, sql: str) -> list[tuple[object, ...]]:
    return raw_sql(store, sql)


def test_sessions_share_one_stored_set_and_every_read_hands_out_the_json(store: Store) -> None:
    _create(store, "s1")
    _create(store, "s2", lease="L")
    stored = _raw(store, "SELECT id, tool_snapshot FROM session ORDER BY id")
    reference = tool_sets.reference_for(SPECS)
    assert reference.startswith("sha256:") and stored == [("s1", reference), ("s2", reference)]
    assert _raw(store, "SELECT digest, specs FROM tool_set") == [(reference, SPECS)]
    assert _read(store, "s1") == _read(store, "s2") == SPECS
    kept = store.leased_row(session_id="s2")
    assert kept is not None and kept.tool_snapshot == SPECS
    assert store.acquire_lease(session_id="s1", lease="L1", ttl_s=60)
    taken = store.leased_row(session_id="s1")
    assert taken is not None and taken.tool_snapshot == SPECS


def test_an_orm_read_resolves_the_reference_and_a_flush_does_not_write_the_json_back(
    store: Store,
) -> None:
    _create(store, "s1")
    tool_sets._memo.clear()  # the load resolves from the database, not this process's memo
    with Session(store.engine) as db:
        row = db.get(SessionRow, "s1")
        assert row is not None and row.tool_snapshot == SPECS
        row.compactions = 3
        db.add(row)
        db.commit()
    assert _raw(store, "SELECT tool_snapshot, compactions FROM session") == [
        (tool_sets.reference_for(SPECS), 3)
    ]


def test_rows_written_before_and_short_sets_hold_the_json_itself(store: Store) -> None:
    _create(store, "s1", specs="[]")
    _create(store, "s2")
    # A row from before the change: the snapshot inline, as every older data directory has.
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE session SET tool_snapshot = :s WHERE id = 's2'"), {"s": SPECS})
    assert _raw(store, "SELECT tool_snapshot FROM session WHERE id = 's1'") == [("[]",)]
    assert (_read(store, "s1"), _read(store, "s2")) == ("[]", SPECS)


def test_a_rebuilt_snapshot_is_stored_by_reference_too(store: Store) -> None:
    _create(store, "s1", specs="[]", lease="L")
    store.set_tool_snapshot(session_id="s1", lease="L", snapshot=SPECS, reason="tools")
    assert _raw(store, "SELECT tool_snapshot FROM session") == [(tool_sets.reference_for(SPECS),)]
    assert _raw(store, "SELECT count(*) FROM tool_set") == [(1,)]
    assert _read(store, "s1") == SPECS


def test_a_set_whose_transaction_rolled_back_is_stored_again(store: Store) -> None:
    with pytest.raises(PersistenceError), store.unit():
        _create(store, "s1")
        # The same id again: the unit fails and rolls back the set it added with it.
        _create(store, "s1")
    assert _raw(store, "SELECT count(*) FROM tool_set") == [(0,)]
    _create(store, "s2")
    assert _raw(store, "SELECT count(*) FROM tool_set") == [(1,)]
    assert _read(store, "s2") == SPECS


def test_a_reference_to_a_set_the_database_lacks_is_an_error_not_an_empty_toolbox(
    store: Store,
) -> None:
    _create(store, "s1")
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM tool_set"))
    tool_sets._memo.clear()
    with pytest.raises(tool_sets.MissingToolSet):
        _read(store, "s1")


@pytest.mark.sqlite_only  # dbstat: SQLite's page accounting
def test_session_rows_fit_their_pages(store: Store) -> None:
    for i in range(20):
        _create(store, f"s{i}", lease="L")
        store.update_session(session_id=f"s{i}", lease="L", compactions=1)
    overflow = _raw(
        store, "SELECT count(*) FROM dbstat WHERE name = 'session' AND pagetype = 'overflow'"
    )
    assert overflow == [(0,)]


def test_a_restarted_store_resolves_its_sets_without_reading_them_per_session(
    tmp_path: Path,
) -> None:
    first = Store.open(tmp_path / "c.db")
    _create(first, "s1")
    first.close()
    tool_sets._memo.clear()
    tool_sets._stored.clear()
    again = Store.open(tmp_path / "c.db")
    statements: list[int] = []
    count_statements(again.engine, lambda: statements.append(1))
    assert _read(again, "s1") == SPECS
    _create(again, "s2")
    # The session's read and the new session's insert: the set was neither read nor stored.
    assert len(statements) == 2
