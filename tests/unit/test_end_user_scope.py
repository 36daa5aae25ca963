"""End users without a server: where the id comes from (app/api/http/end_users.py), the
store's scoping by it, and a database from before end users upgrading at start."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import pytest

from app.api.http.end_users import OnBehalf, listing_scope, on_behalf
from app.api.http.errors import ApiError
from app.config import load_settings
from app.db.store import NewMessage, Store
from app.db.tool_store import memory_notes, search_sessions, update_memory
from tests.support.ledger import api_call
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

KEY = "end-user-scope-key-0123456789"


def _settings(**extra: object):  # type: ignore[no-untyped-def]
    return load_settings(api_key=KEY, upstream_base_url="http://127.0.0.1:9", **extra)


def test_headers_win_over_the_body_in_their_order() -> None:
    settings = _settings(end_user_headers="X-OpenWebUI-User-Id,X-App-User")
    both = {"x-courier-end-user": "explicit", "x-openwebui-user-id": "webui", "x-app-user": "app"}
    body = {"user": "body", "safety_identifier": "hashed"}
    assert on_behalf(both, settings, **body).end_user == "explicit"
    blank = both | {"x-courier-end-user": " "}  # blank is absent: the next header decides
    assert on_behalf(blank, settings, **body).end_user == "webui"
    assert on_behalf({"x-app-user": "app"}, settings, **body).end_user == "app"
    assert on_behalf({}, settings, **body).end_user == "body"
    assert on_behalf({}, settings, user=None, safety_identifier="hashed").end_user == "hashed"
    assert on_behalf({}, settings, user="  ", safety_identifier=None) == OnBehalf()
    # A header the operator did not configure names nobody.
    assert on_behalf({"x-other": "x"}, settings, user=None, safety_identifier=None) == OnBehalf()


def test_a_session_header_is_read_only_when_configured() -> None:
    headers = {"x-openwebui-chat-id": "c1"}
    plain = _settings()
    assert on_behalf(headers, plain, user=None, safety_identifier=None).chat is None
    named = _settings(session_headers="X-OpenWebUI-Chat-Id")
    assert on_behalf(headers, named, user=None, safety_identifier=None).chat == "c1"


@pytest.mark.parametrize(
    ("headers", "user", "param"),
    [
        ({"x-courier-end-user": "a" * 257}, None, "x-courier-end-user"),
        ({}, "line\nbreak", "user"),
        ({}, "nul\x00", "user"),
    ],
)
def test_an_unusable_end_user_is_a_400_naming_its_source(
    headers: dict[str, str], user: str | None, param: str
) -> None:
    with pytest.raises(ApiError) as refused:
        on_behalf(headers, _settings(), user=user, safety_identifier=None)
    assert refused.value.status == 400 and refused.value.param == param


def test_a_listing_for_one_end_user_may_not_ask_for_another() -> None:
    settings = _settings()
    acting = {"x-courier-end-user": "alice"}
    assert listing_scope(acting, settings, requested=None) == "alice"
    assert listing_scope(acting, settings, requested="alice") == "alice"
    assert listing_scope({}, settings, requested="bob") == "bob"
    assert listing_scope({}, settings, requested=None) is None
    with pytest.raises(ApiError) as refused:
        listing_scope(acting, settings, requested="bob")
    assert refused.value.code == "end_user_mismatch"


def test_configured_header_names_must_be_header_names() -> None:
    with pytest.raises(ValueError, match="not an HTTP header name"):
        _settings(end_user_headers="X User")


# ---------------------------------------------------------------------------- the store


def _said(store: Store, sid: str, *, owner: str, end_user: str, text: str) -> None:
    store.create_session(
        session_id=sid,
        owner=owner,
        end_user=end_user,
        profile="p",
        system_prompt="",
        messages=[NewMessage(role="user", content=text)],
    )


@pytest.fixture
def store(store: Store) -> Store:
    # "alice\nb" cannot arrive (ids are printable) but its tag starts with alice's: only
    # the session's own columns decide, whatever the tag's prefix matches.
    for sid, end_user in (("s-a", "alice"), ("s-b", "bob"), ("s-n", ""), ("s-ab", "alice\nb")):
        _said(store, sid, owner="key_1", end_user=end_user, text=f"walrus said by {sid}")
    _said(store, "s-k2", owner="key_2", end_user="alice", text="walrus of another key")
    return store


def _found(store: Store, owner: str, end_user: str | None) -> set[str]:
    hits = search_sessions(store, owner=owner, end_user=end_user, terms=["walrus"], limit=20)
    return {h.session_id for h in hits}


def test_search_sees_one_end_user_or_the_whole_key(store: Store) -> None:
    assert _found(store, "key_1", "alice") == {"s-a"}
    assert _found(store, "key_1", "bob") == {"s-b"}
    assert _found(store, "key_1", "") == {"s-n"}  # no end user: only what has none
    assert _found(store, "key_1", None) == {"s-a", "s-b", "s-n", "s-ab"}
    assert _found(store, "key_2", "alice") == {"s-k2"}
    assert _found(store, "key_2", None) == {"s-k2"}


def test_notes_and_spend_are_kept_per_end_user(store: Store) -> None:
    update_memory(store, owner="key_1", end_user="alice", change=lambda n: [*n, "a"])
    update_memory(store, owner="key_1", end_user="", change=lambda n: [*n, "none"])
    assert memory_notes(store, owner="key_1", end_user="alice") == ["a"]
    assert memory_notes(store, owner="key_1", end_user="bob") == []
    assert memory_notes(store, owner="key_1", end_user="") == ["none"]
    call = api_call("0.5")
    store.record_api_call(session_id="s-a", owner="key_1", end_user="alice", turn_id="t", call=call)
    store.record_api_call(session_id="s-b", owner="key_1", end_user="bob", turn_id="t", call=call)
    assert store.spent_by_owner(owner="key_1") == (Decimal("1.0"), 0)
    assert store.spent_by_owner(owner="key_1", end_user="alice") == (Decimal("0.5"), 0)
    assert store.spent_by_owner(owner="key_1", end_user="carol") == (Decimal(0), 0)


OLD_SCHEMA = (
    "CREATE TABLE memory (owner VARCHAR NOT NULL, notes VARCHAR NOT NULL,"
    " updated_at FLOAT NOT NULL, PRIMARY KEY (owner))",
    "CREATE INDEX ix_session_owner ON session (owner)",
    "CREATE INDEX ix_api_call_owner ON api_call (owner)",
    "CREATE VIEW message_fts_source AS SELECT m.id AS id, m.content AS content,"
    " m.api_content AS api_content, hex(s.owner) AS owner_tag"
    " FROM message m JOIN session s ON s.id = m.session_id",
)


def test_a_database_from_before_end_users_upgrades_at_start(tmp_path: Path) -> None:
    path = tmp_path / "courier.db"
    Store.open(path).close()
    with sqlite3.connect(path) as db:  # turn the fresh schema back into the old one
        db.execute("DROP TABLE alembic_version")  # that release kept no schema version
        db.execute("DROP TABLE memory")
        db.execute("DROP VIEW message_fts_source")
        for name in ("message_fts_ad", "message_fts_au"):
            db.execute(f"DROP TRIGGER {name}")
        db.execute("DROP INDEX ix_session_owner_started")
        db.execute("DROP INDEX ix_session_owner_end_user_started")
        db.execute("DROP INDEX ix_api_call_owner_end_user")
        db.execute("ALTER TABLE session DROP COLUMN end_user")
        db.execute("ALTER TABLE api_call DROP COLUMN end_user")
        for ddl in OLD_SCHEMA:
            db.execute(ddl)
        db.execute("INSERT INTO memory VALUES ('key_1', ?, 1.0)", (json.dumps(["kept"]),))
        # Triggers as they were: an owner-only tag.
        db.execute(
            "CREATE TRIGGER message_fts_ad AFTER DELETE ON message BEGIN "
            "INSERT INTO message_fts(message_fts, rowid, content, api_content, owner_tag) "
            "SELECT 'delete', old.id, old.content, old.api_content, "
            "(SELECT hex(owner) FROM session WHERE id = old.session_id) "
            "WHERE NOT EXISTS (SELECT 1 FROM message_fts_pending WHERE id = old.id); "
            "DELETE FROM message_fts_pending WHERE id = old.id; END"
        )
        db.execute(
            "INSERT INTO session (id, owner, profile, system_prompt, tool_snapshot,"
            " client_tools, transcript_len, client_instructions, verdict_pending,"
            " compaction_strikes, fallback_streak, summary_cooldown_until, compactions,"
            " started_at, updated_at, input_tokens, output_tokens, cache_read_tokens,"
            " cache_write_tokens, reasoning_tokens, cost_usd, cost_unknown_calls,"
            " upstream_calls) VALUES ('s_old', 'key_1', 'p', '', '[]', '[]', 0, '[]', 0,"
            " 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, '0', 0, 0)"
        )
        db.execute(
            "INSERT INTO message (session_id, role, content, is_error, active, compacted,"
            " created_at) VALUES ('s_old', 'user', 'an old walrus', 0, 1, 0, 0)"
        )
        db.execute("INSERT INTO message_fts(message_fts) VALUES ('rebuild')")
        db.execute("DELETE FROM message_fts_pending")

    store = Store.open(path)  # the migration runs here
    try:
        with sqlite3.connect(path) as db:
            indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master")}
            view = db.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'message_fts_source'"
            ).fetchone()[0]
        assert {
            "ix_session_owner_started",
            "ix_session_owner_end_user_started",
            "ix_api_call_owner_end_user",
        } <= indexes
        assert not {"ix_session_owner", "ix_api_call_owner"} & indexes
        assert "end_user" in view
        # The old notes are the key's own (no end user); an end user gets a row of its own.
        assert memory_notes(store, owner="key_1", end_user="") == ["kept"]
        update_memory(store, owner="key_1", end_user="alice", change=lambda n: [*n, "hers"])
        assert memory_notes(store, owner="key_1", end_user="alice") == ["hers"]
        session = store.get_session(session_id="s_old")
        assert session is not None and session.end_user == ""
        # Rows indexed before the upgrade keep matching, for the key and for "no end user".
        assert _found(store, "key_1", "") == {"s_old"}
        assert _found(store, "key_1", None) == {"s_old"}
        assert _found(store, "key_1", "alice") == set()
        # A new end user's session is indexed under its own tag.
        _said(store, "s_new", owner="key_1", end_user="alice", text="a new walrus")
        assert _found(store, "key_1", "alice") == {"s_new"}
        assert _found(store, "key_1", "") == {"s_old"}
    finally:
        store.close()
