"""SQL for the stateful tools: cross-session search, memory notes and the todo list.

Kept beside `store.py` because nothing outside `app/db/` writes SQL; the tools in
`app/tools/` hold the policy (caps, wording) and hand pure functions to the locked
read-modify-write helpers here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, text
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.db.models import MessageRow, SessionRow
from app.db.raw import Hot
from app.db.search_index import scope_tag
from app.db.store import Store


class ToolStateError(Exception):
    """The requested change cannot be made (unknown session, ...); the text is model-readable."""


# --------------------------------------------------------------------------- search

# Upper-case words FTS5 would read as operators. Quoting already makes them inert, but a
# user who typed `a AND b` meant the operator, not a search for the word "and".
_FTS_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})
MAX_TERMS = 16
MAX_TERM_CHARS = 64
_SNIPPET_TOKENS = 16


def fts_terms(raw: str) -> list[str]:
    """Split free text into terms that are safe to quote as FTS5 strings.

    Nothing the caller typed ever reaches MATCH as syntax: double quotes and NUL are
    dropped, bare operators are dropped, and chunks with no letter or digit are dropped
    (they would quote to an empty phrase). What is left keeps its inner punctuation, which
    the tokenizer treats as a separator, so `col:term` becomes the phrase "col term".
    """
    cleaned = raw.replace("\x00", " ").replace('"', " ")
    terms: list[str] = []
    for chunk in cleaned.split():
        core = "".join(ch for ch in chunk if ch.isalnum())
        if not core or core in _FTS_OPERATORS:
            continue
        term = chunk[:MAX_TERM_CHARS]
        if term not in terms:
            terms.append(term)
        if len(terms) == MAX_TERMS:
            break
    return terms


def _match_expression(terms: Sequence[str], *, any_term: bool) -> str:
    # Quoting here as well as in fts_terms: this function must be safe whatever it is given.
    quoted = ['"' + t.replace("\x00", "").replace('"', '""') + '"' for t in terms]
    return (" OR " if any_term else " ").join(quoted)


@dataclass(frozen=True, slots=True)
class WindowMessage:
    id: int
    role: str
    text: str
    archived: bool
    """Summarised away by a compaction: no longer in the live transcript, still searchable."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    session_id: str
    session_started_at: float
    message_id: int
    role: str
    archived: bool
    snippet: str
    before: tuple[WindowMessage, ...]
    after: tuple[WindowMessage, ...]


def _message_text(row: MessageRow) -> str:
    if row.content:
        return row.content
    if row.api_content:
        return row.api_content
    if row.tool_calls:
        try:
            names = [str(c.get("name", "?")) for c in json.loads(row.tool_calls)]
        except (ValueError, AttributeError):
            names = []
        return f"(called {', '.join(names) or 'tools'})"
    return ""


def _window_message(row: MessageRow) -> WindowMessage:
    assert row.id is not None
    return WindowMessage(id=row.id, role=row.role, text=_message_text(row), archived=not row.active)


_BEST_PER_SESSION = text(
    "WITH matched AS ("
    " SELECT rowid AS id, bm25(message_fts, 1.0, 1.0, 0.0) AS score"
    " FROM message_fts WHERE message_fts MATCH :owned"
    "), hits AS ("
    " SELECT m.id AS id, m.session_id AS session_id, matched.score AS score"
    " FROM matched"
    " JOIN message m ON m.id = matched.id"
    " JOIN session s ON s.id = m.session_id"
    " WHERE s.owner = :owner AND (:any_user OR s.end_user = :end_user)"
    " AND (m.active = 1 OR m.compacted = 1)"
    " AND (:session_id IS NULL OR s.id = :session_id)"
    "), ranked AS ("
    " SELECT id, session_id, score, ROW_NUMBER() OVER ("
    "  PARTITION BY session_id ORDER BY score, id DESC) AS rn"
    " FROM hits"
    ") SELECT id, session_id FROM ranked WHERE rn = 1"
    " ORDER BY score, id DESC LIMIT :limit"
)
"""The best hit per session, in SQL, so one chatty session cannot crowd the others out of a
candidate list before deduplication. Ties go to the most recent message. The session's
owner and end user stay the authority; the index's owner tag is the fast path."""


def _around(
    db: Session, hit: MessageRow, *, before: int, after: int
) -> tuple[tuple[WindowMessage, ...], tuple[WindowMessage, ...]]:
    """The messages just before and just after a hit in its session, live or compacted."""
    visible = (
        MessageRow.session_id == hit.session_id,
        col(MessageRow.active).is_(True) | col(MessageRow.compacted).is_(True),
    )
    earlier = db.exec(
        select(MessageRow)
        .where(*visible, col(MessageRow.id) < hit.id)
        .order_by(col(MessageRow.id).desc())
        .limit(before)
    ).all()
    later = db.exec(
        select(MessageRow)
        .where(*visible, col(MessageRow.id) > hit.id)
        .order_by(col(MessageRow.id))
        .limit(after)
    ).all()
    shown_before = tuple(_window_message(m) for m in reversed(earlier))
    return shown_before, tuple(_window_message(m) for m in later)


def search_sessions(
    store: Store,
    *,
    owner: str,
    end_user: str | None,
    terms: Sequence[str],
    limit: int,
    any_term: bool = False,
    before: int = 1,
    after: int = 1,
    session_id: str | None = None,
) -> list[SearchHit]:
    """The best-ranked message per session among `owner`'s sessions (or only in
    `session_id`, one of them), best sessions first: only `end_user`'s ("" for the sessions
    made without an end user), or every end user's of the key when it is None.

    Live and compacted rows match; retracted rows (active=0, compacted=0) neither match nor
    appear in a window, since retraction means the message should not have existed.
    `terms` are quoted here, so a caller cannot pass FTS syntax even by mistake. Waits on
    the store's writer thread (see `Store.searchable`): not for the event loop.
    """
    if not terms or limit < 1:
        return []
    store.searchable()  # the newest messages are indexed in batches: catch up first
    # The terms only ever match the text columns; the scope's token narrows the rows inside
    # the index, before anything is ranked. Every end user's tag starts with the key's.
    match = "{content api_content} : (" + _match_expression(terms, any_term=any_term) + ")"
    tag = f'"{scope_tag(owner, end_user or "")}"' + (" *" if end_user is None else "")
    owned = f"owner_tag : {tag} AND {match}"
    with Session(store.engine) as db:
        conn = db.connection()
        best = conn.execute(
            _BEST_PER_SESSION,
            {
                "owned": owned,
                "owner": owner,
                "any_user": end_user is None,
                "end_user": end_user or "",
                "limit": limit,
                "session_id": session_id,
            },
        ).all()
        if not best:
            return []
        ids = [int(r[0]) for r in best]
        # Snippets only for the winners: snippet() re-tokenizes the row, too costly per hit.
        found = conn.execute(
            text(
                "SELECT rowid, snippet(message_fts, -1, '**', '**', '…', :tokens)"
                " FROM message_fts WHERE message_fts MATCH :q AND rowid IN :ids"
            ).bindparams(bindparam("ids", expanding=True)),
            {"q": match, "ids": ids, "tokens": _SNIPPET_TOKENS},
        ).all()
        snippets = {int(r[0]): str(r[1] or "") for r in found}
        rows = {
            r.id: r for r in db.exec(select(MessageRow).where(col(MessageRow.id).in_(ids))).all()
        }
        sessions = {
            s.id: s
            for s in db.exec(
                select(SessionRow).where(col(SessionRow.id).in_({r[1] for r in best}))
            ).all()
        }
        hits: list[SearchHit] = []
        for message_id in ids:
            row = rows[message_id]
            earlier, later = _around(db, row, before=before, after=after)
            hits.append(
                SearchHit(
                    session_id=row.session_id,
                    session_started_at=sessions[row.session_id].started_at,
                    message_id=message_id,
                    role=row.role,
                    archived=not row.active,
                    snippet=str(snippets.get(message_id) or _message_text(row)),
                    before=earlier,
                    after=later,
                )
            )
        return hits


# --------------------------------------------------------------------------- memory


# A tool call's own reads and writes, on the DBAPI cursor like the turn's (app/db/raw.py).
_NOTES = Hot("SELECT notes FROM memory WHERE owner = :owner AND end_user = :end_user")
_OPEN_NOTES = Hot(
    "INSERT INTO memory (owner, end_user, notes, updated_at)"
    " VALUES (:owner, :end_user, '[]', :now) ON CONFLICT (owner, end_user) DO NOTHING"
)
_SET_NOTES = Hot(
    "UPDATE memory SET notes = :notes, updated_at = :now"
    " WHERE owner = :owner AND end_user = :end_user"
)
_TODO = Hot("SELECT items, next_id FROM todo_list WHERE session_id = :sid")
_OPEN_TODO = Hot(
    "INSERT INTO todo_list (session_id, items, next_id, updated_at)"
    " VALUES (:sid, '[]', 1, :now) ON CONFLICT (session_id) DO NOTHING"
)
_SET_TODO = Hot(
    "UPDATE todo_list SET items = :items, next_id = :next, updated_at = :now"
    " WHERE session_id = :sid"
)


def memory_notes(store: Store, *, owner: str, end_user: str) -> list[str]:
    """One end user's notes under one key ("" for none): read when every new session is
    made (its prompt freezes them), so a hot statement."""
    with store.reader() as conn:
        row = _NOTES.run(conn, {"owner": owner, "end_user": end_user}).fetchone()
    return _decode_notes(row[0]) if row is not None else []


def _decode_notes(raw: str) -> list[str]:
    value = json.loads(raw)
    return [str(n) for n in value] if isinstance(value, list) else []


def update_memory(
    store: Store, *, owner: str, end_user: str, change: Callable[[list[str]], list[str]]
) -> list[str]:
    """Apply `change` to one end user's notes under one key atomically and return the
    stored result.

    `change` runs while this transaction holds SQLite's write lock (the upsert comes
    first), so a cap it checks cannot be overtaken by a concurrent write; whatever it
    raises propagates unchanged, and nothing is written but, when the owner had no row,
    the empty one the upsert made (it reads as no notes; outside a unit it rolls back too).
    """
    scope = {"owner": owner, "end_user": end_user}
    with store.begin() as conn:
        _OPEN_NOTES.run(conn, scope | {"now": time.time()})
        [raw] = _NOTES.run(conn, scope).fetchone()
        notes = change(_decode_notes(raw))
        encoded = json.dumps(notes, ensure_ascii=False)
        _SET_NOTES.run(conn, scope | {"notes": encoded, "now": time.time()})
    return list(notes)


# --------------------------------------------------------------------------- todo


@dataclass(frozen=True, slots=True)
class TodoItem:
    id: int
    text: str
    status: str


@dataclass(frozen=True, slots=True)
class TodoState:
    items: tuple[TodoItem, ...]
    next_id: int


def _decode_todo(items: str, next_id: int) -> TodoState:
    decoded = tuple(
        TodoItem(id=int(i["id"]), text=str(i["text"]), status=str(i["status"]))
        for i in json.loads(items)
    )
    return TodoState(items=decoded, next_id=int(next_id))


def todo_state(store: Store, *, session_id: str) -> TodoState:
    with store.reader() as conn:
        row = _TODO.run(conn, {"sid": session_id}).fetchone()
    return _decode_todo(*row) if row is not None else TodoState(items=(), next_id=1)


def update_todo(
    store: Store, *, session_id: str, change: Callable[[TodoState], TodoState]
) -> TodoState:
    """Apply `change` to the session's todo list atomically and return the stored result.

    Same locking as `update_memory`: the upsert takes the write lock before the read, and
    what `change` raises leaves at most the empty list the upsert made.
    """
    with store.begin() as conn:
        try:
            _OPEN_TODO.run(conn, {"sid": session_id, "now": time.time()})
        except IntegrityError as exc:
            raise ToolStateError(f"no such session: {session_id}") from exc
        [items, next_id] = _TODO.run(conn, {"sid": session_id}).fetchone()
        state = change(_decode_todo(items, next_id))
        encoded = json.dumps(
            [{"id": i.id, "text": i.text, "status": i.status} for i in state.items],
            ensure_ascii=False,
        )
        _SET_TODO.run(
            conn, {"sid": session_id, "items": encoded, "next": state.next_id, "now": time.time()}
        )
    return state
