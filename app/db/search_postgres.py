"""The full-text index over messages on PostgreSQL: a tsvector per message, GIN-indexed
with its scope first. SQLite's FTS5 index is app/db/search_index.py; this is its twin.

Same mechanics as FTS5, so the turn's commits pay nothing: an insert (or a change of a
message's text) only notes its id in `message_fts_pending`, by trigger; `index_pending`
turns what is noted into `message_search` rows in one statement, in the background and
before every search. Each row carries its session's owner and end user (both fixed at the
session's creation), and the GIN index leads with them (`btree_gin`), so a search
intersects the caller's scope with the terms inside the index: filtering by owner after
the match read every owner's matches first. `'simple'` configuration, as FTS5's unicode61
tokenizer: lower-cased words, no stemming, no stop words.

User text never becomes tsquery syntax: each term is one `phraseto_tsquery` (a term with
inner punctuation is a phrase, as a quoted FTS5 string is). Ranking is `ts_rank_cd` with
length normalisation (1: divided by 1 + log(length)), which orders rows as bm25 does where
it matters: more of the terms first, then the shorter row (plain `ts_rank` hardly counts a
repeated term: "mango once" outranked "mango mango best"). Only the
newest `candidates` matches are ranked, so a word in every message of a large scope costs
a bounded read (4 ms for 1,000 of 400,000 where ranking them all took 1.2 s).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, text

from app.db.raw import Hot

DDL = (
    # Trusted since PostgreSQL 13: a database owner may create it, no superuser needed.
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    "CREATE TABLE message_fts_pending (id BIGINT PRIMARY KEY)",
    """CREATE TABLE message_search (
        id BIGINT PRIMARY KEY REFERENCES message (id) ON DELETE CASCADE,
        owner VARCHAR NOT NULL,
        end_user VARCHAR NOT NULL,
        doc TSVECTOR NOT NULL)""",
    "CREATE INDEX ix_message_search_scope_doc ON message_search USING gin (owner, end_user, doc)",
    # The newest matches of a scope first, when a term is in most of its rows.
    "CREATE INDEX ix_message_search_scope_id ON message_search (owner, end_user, id)",
    """CREATE FUNCTION message_fts_note() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO message_fts_pending (id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
            RETURN NULL;
        END $$""",
    """CREATE TRIGGER message_fts_ai AFTER INSERT ON message
        FOR EACH ROW EXECUTE FUNCTION message_fts_note()""",
    # Flag flips (compaction, retraction) change no text: they cost no index work.
    """CREATE TRIGGER message_fts_au AFTER UPDATE OF content, api_content ON message
        FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content
                           OR OLD.api_content IS DISTINCT FROM NEW.api_content)
        EXECUTE FUNCTION message_fts_note()""",
)

# Two processes at once: the second's DELETE waits on the rows the first took, then skips
# them, so no message is indexed twice into a stale vector.
INDEX_PENDING = Hot(
    "WITH taken AS (DELETE FROM message_fts_pending RETURNING id) "
    "INSERT INTO message_search (id, owner, end_user, doc) "
    "SELECT m.id, s.owner, s.end_user, "
    "to_tsvector('simple', coalesce(m.content, '') || ' ' || coalesce(m.api_content, '')) "
    "FROM taken JOIN message m ON m.id = taken.id JOIN session s ON s.id = m.session_id "
    "ON CONFLICT (id) DO UPDATE SET doc = excluded.doc",
    only="postgresql",
)


def install(conn: Connection) -> None:
    """The index's tables, indexes and triggers, in the caller's transaction (the
    baseline migration's)."""
    for ddl in DDL:
        conn.execute(text(ddl))


def index_pending(conn: Connection) -> int:
    """Index every message noted as pending, in the caller's transaction; how many."""
    return int(INDEX_PENDING.run(conn, {}).rowcount)


def _query(terms: Sequence[str], *, any_term: bool) -> tuple[str, dict[str, Any]]:
    """The tsquery of the terms as SQL with bound values: each a phrase, all (or any)."""
    joined = (" || " if any_term else " && ").join(
        f"phraseto_tsquery('simple', :t{i})" for i in range(len(terms))
    )
    return f"({joined})", {f"t{i}": term for i, term in enumerate(terms)}


def best_hits(
    conn: Connection,
    *,
    owner: str,
    end_user: str | None,
    terms: Sequence[str],
    any_term: bool,
    session_id: str | None,
    limit: int,
    candidates: int,
) -> list[tuple[int, str]]:
    """(message id, session) of each session's best match among the scope's newest
    `candidates` matches, best first; ties go to the newest message. The scope is the
    owner's sessions, one end user's when `end_user` is not None ("" for none)."""
    query, params = _query(terms, any_term=any_term)
    # Conditions chosen here, not `(:x IS NULL OR ...)`: PostgreSQL cannot type a NULL
    # parameter, and each form gets a plan of its own.
    scope = "f.owner = :owner" + ("" if end_user is None else " AND f.end_user = :end_user")
    one = "" if session_id is None else " AND m.session_id = :session_id"
    sql = (
        f"WITH q AS (SELECT {query} AS q), matched AS ("
        " SELECT f.id, m.session_id, f.doc FROM message_search f"
        " JOIN message m ON m.id = f.id, q"
        f" WHERE {scope} AND f.doc @@ q.q AND (m.active OR m.compacted){one}"
        " ORDER BY f.id DESC LIMIT :candidates"
        "), ranked AS ("
        " SELECT matched.id, session_id, ts_rank_cd(doc, q.q, 1) AS score, ROW_NUMBER() OVER ("
        "  PARTITION BY session_id ORDER BY ts_rank_cd(doc, q.q, 1) DESC, matched.id DESC) AS rn"
        " FROM matched, q"
        ") SELECT id, session_id FROM ranked WHERE rn = 1 ORDER BY score DESC, id DESC"
        " LIMIT :limit"
    )
    params |= {
        "owner": owner,
        "end_user": end_user or "",
        "session_id": session_id,
        "limit": limit,
        "candidates": candidates,
    }
    return [(int(r[0]), str(r[1])) for r in conn.execute(text(sql), params)]


def snippets(
    conn: Connection, *, ids: Sequence[int], terms: Sequence[str], any_term: bool, words: int
) -> dict[int, str]:
    """The matched words in context, marked `**` as FTS5's snippets are, for the winners
    only: ts_headline re-parses the row's text."""
    query, params = _query(terms, any_term=any_term)
    sql = text(
        "SELECT m.id, ts_headline('simple', coalesce(nullif(m.content, ''), m.api_content, ''),"
        f" {query}, 'StartSel=**, StopSel=**, MaxWords={int(words)}, MinWords=4')"
        " FROM message m WHERE m.id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    return {int(r[0]): str(r[1] or "") for r in conn.execute(sql, params | {"ids": list(ids)})}


def session_matches(conn: Connection, *, session_id: str, query: str, limit: int) -> list[int]:
    """Ids of one session's live and compacted messages holding every word of `query`."""
    found = conn.execute(
        text(
            "SELECT m.id FROM message_search f JOIN message m ON m.id = f.id"
            " WHERE f.doc @@ plainto_tsquery('simple', :q) AND m.session_id = :sid"
            " AND (m.active OR m.compacted) ORDER BY m.id LIMIT :limit"
        ),
        {"q": query, "sid": session_id, "limit": limit},
    )
    return [int(r[0]) for r in found]
