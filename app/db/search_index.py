"""The full-text index over messages, kept up to date in batches rather than per insert.

The index is FTS5, external-content over a view that adds each row's scope as one token:
its session's owner, and end user when it has one (`scope_tag`: hex, letters and digits
only, so the tokenizer keeps it whole). Search then intersects the scope's rows with the
terms inside FTS5 and ranks only those; filtering by owner after the MATCH ranked every
owner's hits first (seconds at 1M rows). A session without an end user has the tag it had
before end users existed, `hex(owner)`, so adding them re-indexed nothing; every end user's
tag starts with its key's, so a search over a whole key is one prefix query.

A new message is not indexed by its own transaction: its insert only notes its id in
`message_fts_pending`. Indexed per insert, every turn's commit paid for FTS5's tokenizer,
a new index segment and its merges: three of a new-session commit's 18 pages and about
4 % of the request's instructions. `index_pending` indexes what is noted in one
statement; the store runs it in the background about once a second (one segment for all
the turns of that second) and before any search, so a search still sees every committed
message.

Deleting or rewriting a message must tell FTS5 the values it indexed, which only holds
for an indexed row; a pending one is simply taken off the list (it is indexed as it then
stands). Flipping the `active`/`compacted` flags during a compaction costs no index work.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from app.db import search_postgres
from app.db.raw import Hot

_SCOPE = "hex({s}owner || CASE {s}end_user WHEN '' THEN '' ELSE char(10) || {s}end_user END)"
"""The scope tag of a session row, as `scope_tag` computes it."""
_OWNER_TAG = "(SELECT " + _SCOPE.format(s="") + " FROM session WHERE id = {row}.session_id)"
_INDEXED = "NOT EXISTS (SELECT 1 FROM message_fts_pending WHERE id = old.id)"

DDL = (
    f"""CREATE VIEW IF NOT EXISTS message_fts_source AS
        SELECT m.id AS id, m.content AS content, m.api_content AS api_content,
               {_SCOPE.format(s="s.")} AS owner_tag
        FROM message m JOIN session s ON s.id = m.session_id""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS message_fts USING fts5(
        content, api_content, owner_tag, content='message_fts_source', content_rowid='id')""",
    "CREATE TABLE IF NOT EXISTS message_fts_pending (id INTEGER PRIMARY KEY)",
    """CREATE TRIGGER IF NOT EXISTS message_fts_ai AFTER INSERT ON message BEGIN
        INSERT INTO message_fts_pending(id) VALUES (new.id);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS message_fts_ad AFTER DELETE ON message BEGIN
        INSERT INTO message_fts(message_fts, rowid, content, api_content, owner_tag)
        SELECT 'delete', old.id, old.content, old.api_content, {_OWNER_TAG.format(row="old")}
        WHERE {_INDEXED};
        DELETE FROM message_fts_pending WHERE id = old.id;
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS message_fts_au AFTER UPDATE OF content, api_content
        ON message WHEN {_INDEXED} BEGIN
        INSERT INTO message_fts(message_fts, rowid, content, api_content, owner_tag)
        VALUES ('delete', old.id, old.content, old.api_content, {_OWNER_TAG.format(row="old")});
        INSERT INTO message_fts(rowid, content, api_content, owner_tag)
        VALUES (new.id, new.content, new.api_content, {_OWNER_TAG.format(row="new")});
    END""",
)
_TRIGGERS = ("message_fts_ai", "message_fts_ad", "message_fts_au")

INDEX_PENDING = Hot(
    "INSERT INTO message_fts(rowid, content, api_content, owner_tag) "
    f"SELECT m.id, m.content, m.api_content, {_OWNER_TAG.format(row='m')} "
    "FROM message_fts_pending p JOIN message m ON m.id = p.id ORDER BY p.id",
    only="sqlite",
)
CLEAR_PENDING = Hot("DELETE FROM message_fts_pending", only="sqlite")


def scope_tag(owner: str, end_user: str) -> str:
    """The token a session's rows carry in the index (`_SCOPE`, computed the same way)."""
    scope = owner + ("\n" + end_user if end_user else "")
    return scope.encode().hex().upper()


def _sql_of(conn: Connection, kind: str, name: str) -> str | None:
    found = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = :kind AND name = :name"),
        {"kind": kind, "name": name},
    ).scalar()
    return None if found is None else str(found)


def install(conn: Connection) -> None:
    """Create the index, or bring an older one up to date; idempotent.

    An index from before the owner column is rebuilt once (same rows, one more column:
    the rebuild reads every message once); triggers from before the pending list, and the
    view and triggers from before end users, are replaced, their index being whole (every
    row indexed before end users existed has the tag it would have now)."""
    found = _sql_of(conn, "table", "message_fts")
    rebuild = found is not None and "owner_tag" not in found
    insert_trigger = _sql_of(conn, "trigger", "message_fts_ai")
    view = _sql_of(conn, "view", "message_fts_source")
    if view is not None and "end_user" not in view:
        conn.execute(text("DROP VIEW message_fts_source"))
        for trigger in _TRIGGERS:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
    if rebuild or (insert_trigger is not None and "message_fts_pending" not in insert_trigger):
        for trigger in _TRIGGERS:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {trigger}"))
    if rebuild:
        conn.execute(text("DROP TABLE message_fts"))
    for ddl in DDL:
        conn.execute(text(ddl))
    if rebuild:
        conn.execute(text("INSERT INTO message_fts(message_fts) VALUES ('rebuild')"))
        conn.execute(text("DELETE FROM message_fts_pending"))  # the rebuild read them all


def index_pending(conn: Connection) -> int:
    """Index every message noted as pending, in the caller's transaction; how many."""
    if conn.dialect.name == "postgresql":
        return search_postgres.index_pending(conn)
    indexed: int = INDEX_PENDING.run(conn, {}).rowcount
    if indexed:
        CLEAR_PENDING.run(conn, {})
    return indexed
