"""The full-text index over messages, kept up to date in batches rather than per insert.

The index is FTS5, external-content over a view that adds each row's owner as one token
(`hex(owner)`: letters and digits only, so the tokenizer keeps it whole). Search then
intersects the owner's rows with the terms inside FTS5 and ranks only those; filtering
by owner after the MATCH ranked every owner's hits first (seconds at 1M rows).

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

from app.db.raw import Hot

_OWNER_TAG = "(SELECT hex(owner) FROM session WHERE id = {row}.session_id)"
_INDEXED = "NOT EXISTS (SELECT 1 FROM message_fts_pending WHERE id = old.id)"

DDL = (
    """CREATE VIEW IF NOT EXISTS message_fts_source AS
        SELECT m.id AS id, m.content AS content, m.api_content AS api_content,
               hex(s.owner) AS owner_tag
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
    "FROM message_fts_pending p JOIN message m ON m.id = p.id ORDER BY p.id"
)
CLEAR_PENDING = Hot("DELETE FROM message_fts_pending")


def install(conn: Connection) -> None:
    """Create the index, or bring an older one up to date; idempotent.

    An index from before the owner column is rebuilt once (same rows, one more column:
    the rebuild reads every message once); triggers from before the pending list are
    replaced, their index being whole."""
    found = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'message_fts'")
    ).scalar()
    rebuild = found is not None and "owner_tag" not in str(found)
    insert_trigger = conn.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = 'message_fts_ai'")
    ).scalar()
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
    indexed: int = INDEX_PENDING.run(conn, {}).rowcount
    if indexed:
        CLEAR_PENDING.run(conn, {})
    return indexed
