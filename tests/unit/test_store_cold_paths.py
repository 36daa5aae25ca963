"""The store's cold paths run the same on SQLite and on PostgreSQL: each statement once,
with what it must leave behind.

The hot statements are PREPAREd on PostgreSQL (test_postgres_statements.py); these are
the `text()` ones outside the turn path (retracting and purging a session, an exchange's
retraction and deletion, durable idempotency's replace, key cool-downs, the readiness
write, the turn listing), where SQLite's `INSERT OR REPLACE`, `rowid` and `active = 1` were.
"""

from __future__ import annotations

import time

from app.db import session_query as q
from app.db.idempotency_store import IdempotencyStore
from app.db.key_store import KeyStateStore
from app.db.store import NewMessage, Store
from app.db.turn_store import session_turns
from app.db.write_probe import database_writable
from tests.support.stores import BACKENDS, raw_sql

STORE_BACKENDS = BACKENDS


def _session(store: Store, sid: str, *texts: str) -> list[int]:
    store.create_session(session_id=sid, owner="k1", profile="p", system_prompt="sys")
    assert store.acquire_lease(session_id=sid, lease="L", ttl_s=60)
    store.start_turn(session_id=sid, lease="L", turn_id=f"turn-{sid}")
    ids = store.append_messages(
        session_id=sid,
        lease="L",
        turn_id=f"turn-{sid}",
        messages=[NewMessage("user", t) for t in texts],
    )
    store.finish_turn(turn_id=f"turn-{sid}", exit_reason="completed", iterations=1)
    return ids


def test_retracting_a_session_hides_every_row_and_marks_it(store: Store) -> None:
    _session(store, "s1", "the walrus", "the carpenter")
    q.retract_session(store, session_id="s1")
    assert q.is_retracted(store, session_id="s1")
    assert raw_sql(store, "SELECT count(*) FROM message WHERE active OR compacted") == [(0,)]
    assert store.search_messages(session_id="s1", query="walrus") == []


def test_purging_a_session_deletes_its_text_and_keeps_its_row(store: Store) -> None:
    _session(store, "s1", "the walrus")
    q.purge_session(store, session_id="s1")
    assert raw_sql(store, "SELECT count(*) FROM message") == [(0,)]
    assert raw_sql(store, "SELECT system_prompt FROM session WHERE id = 's1'") == [("",)]
    assert raw_sql(store, "SELECT purged FROM session_retraction") == [(True,)]


def test_an_exchange_is_retracted_then_deleted_under_the_lease(store: Store) -> None:
    first, second = _session(store, "s1", "keep me", "retract me")
    assert (
        q.retract_messages(store, session_id="s1", lease="L", first_id=second, last_id=second) == 1
    )
    assert [m.content for m in store.active_messages(session_id="s1")] == ["keep me"]
    assert (
        q.delete_messages(store, session_id="s1", lease="other", first_id=first, last_id=first) == 0
    )
    assert q.delete_messages(store, session_id="s1", lease="L", first_id=first, last_id=first) == 1
    assert raw_sql(store, "SELECT content FROM message") == [("retract me",)]


def test_an_idempotency_key_started_again_replaces_the_record(store: Store) -> None:
    _session(store, "s1", "hi")
    keys = IdempotencyStore(store)
    keys.started(owner="k1", key="k", digest="d1", turn_id="t1", session_id="s1")
    keys.finished(owner="k1", key="k", completion_id="c1", created=7, events=[{"e": 1}])
    found = keys.find(owner="k1", key="k")
    assert found is not None and (found.turn_id, found.events) == ("t1", [{"e": 1}])
    keys.started(owner="k1", key="k", digest="d2", turn_id="t2", session_id="s1")
    found = keys.find(owner="k1", key="k")
    assert found is not None
    assert (found.digest, found.turn_id, found.completion_id, found.events) == (
        "d2",
        "t2",
        "",
        None,
    )


def test_a_key_cooled_twice_counts_two_failures_with_exact_times(store: Store) -> None:
    keys = KeyStateStore(store.engine)
    until = time.time() + 3600.123456  # epoch seconds: a 4-byte float would round minutes
    keys.cool("p", "key-a", until=until - 1, reason="rate_limited")
    keys.cool("p", "key-a", until=until, reason="revoked")
    assert keys.cooling("p") == {"key-a": until}
    assert raw_sql(store, "SELECT failures, reason FROM upstream_key_state") == [(2, "revoked")]


def test_the_readiness_write_succeeds_again_and_again(store: Store) -> None:
    assert database_writable(store) is None
    assert database_writable(store) is None
    assert raw_sql(store, "SELECT count(*) FROM health_probe") == [(1,)]


def test_a_sessions_turns_are_listed_oldest_first(store: Store) -> None:
    _session(store, "s1", "hi")
    for n in range(3):
        store.start_turn(session_id="s1", lease="L", turn_id=f"t{n}")
        store.finish_turn(turn_id=f"t{n}", exit_reason="completed", iterations=1)
    turns, total = session_turns(store.engine, session_id="s1", limit=2, offset=1)
    assert total == 4
    assert [t.id for t in turns] == ["t0", "t1"]
