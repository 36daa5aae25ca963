"""An index from before the owner column is rebuilt at startup, and search then finds the
same rows, still only the caller's."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from app.db.store import Store
from app.db.tool_store import search_sessions

OLD_FTS = (
    "CREATE VIRTUAL TABLE message_fts USING fts5("
    "content, api_content, content='message', content_rowid='id')",
    "CREATE TRIGGER message_fts_ai AFTER INSERT ON message BEGIN "
    "INSERT INTO message_fts(rowid, content, api_content) "
    "VALUES (new.id, new.content, new.api_content); END",
)


def test_an_old_index_is_rebuilt_with_owners(tmp_path: Path) -> None:
    path = tmp_path / "courier.db"
    store = Store.open(path)
    for sid, owner in (("s1", "alice"), ("s2", "bob")):
        store.create_session(session_id=sid, owner=owner, profile="p", system_prompt="")
    store.close()
    with sqlite3.connect(path) as db:  # turn the fresh schema back into the old one
        db.execute("DROP TABLE alembic_version")  # that release kept no schema version
        for name in ("message_fts_ai", "message_fts_ad", "message_fts_au"):
            db.execute(f"DROP TRIGGER {name}")
        db.execute("DROP TABLE message_fts")
        for ddl in OLD_FTS:
            db.execute(ddl)
        db.executemany(
            "INSERT INTO message (session_id, role, content, is_error, active, compacted,"
            " created_at) VALUES (?, 'user', ?, 0, 1, 0, 0)",
            [("s1", "the deploy failed"), ("s2", "bob deploys too")],
        )
        assert db.execute("SELECT count(*) FROM message_fts('deploy')").fetchone() == (1,)
        assert (
            "owner_tag"
            not in db.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'message_fts'"
            ).fetchone()[0]
        )

    store = Store.open(path)  # the migration runs here
    try:
        with sqlite3.connect(path) as db:
            sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'message_fts'").fetchone()
            assert "owner_tag" in sql[0]
        hits = search_sessions(store, owner="alice", end_user=None, terms=["deploy"], limit=5)
        assert [(h.session_id, h.snippet) for h in hits] == [("s1", "the **deploy** failed")]
        assert search_sessions(store, owner="bob", end_user=None, terms=["failed"], limit=5) == []
        # An owner's own token is not a search term: it only ever narrows the rows.
        tag = b"alice".hex()
        assert search_sessions(store, owner="alice", end_user=None, terms=[tag], limit=5) == []
    finally:
        store.close()
