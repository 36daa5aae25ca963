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
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.exc import IntegrityError

from app.db import search_postgres
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


def _text_of(content: str | None, api_content: str | None, tool_calls: str | None) -> str:
    if content:
        return content
    if api_content:
        return api_content
    if tool_calls:
        try:
            names = [str(c.get("name", "?")) for c in json.loads(tool_calls)]
        except (ValueError, AttributeError):
            names = []
        return f"(called {', '.join(names) or 'tools'})"
    return ""


CANDIDATES = 1_000
"""Matches ranked per round, the newest of the caller's first. Ranking every match cost
time in proportion to what the caller ever wrote: a common word in 40,000 of one key's
messages took 981 ms (bm25 for all of them, then the join). `ORDER BY rank LIMIT n` does not
help: FTS5 still scores every match (123 ms)."""
CANDIDATE_ROUNDS = 3
"""Rounds of older candidates read while fewer than `limit` sessions are found (one
chatty session can hold a whole round); past them, older matches are not ranked."""
DENSE_SPAN = 8
"""A round's id range holding at most this many matches of the terms per candidate is
scored by the terms alone: bm25 then costs those few rows. Past that (a small scope's
matches spread among many others': 34,000 rows to score for 8 candidates), it is scored
with the scope's tag in the MATCH, which costs a pass over every row of the scope (bm25's
IDF counts the tag's rows: 23 ms at 400,000) but no other scope's rows. bm25 over `rowid IN
(ids)` instead ran one FTS5 lookup, and its whole IDF pass, per id (2 s for 1,000)."""

_NEWEST = Hot(
    "SELECT rowid FROM message_fts WHERE message_fts MATCH :owned ORDER BY rowid DESC LIMIT :n",
    only="sqlite",
)
# Its own statement, not `(:below IS NULL OR rowid < :below)`: FTS5 cannot seek on that,
# which doubled the first round's cost.
_NEWEST_BELOW = Hot(
    "SELECT rowid FROM message_fts WHERE message_fts MATCH :owned AND rowid < :below"
    " ORDER BY rowid DESC LIMIT :n",
    only="sqlite",
)
# Counted without bm25 (so without its IDF pass), and only up to the bound that decides.
_IN_RANGE = Hot(
    "SELECT count(*) FROM (SELECT rowid FROM message_fts"
    " WHERE message_fts MATCH :q AND rowid BETWEEN :lo AND :hi LIMIT :n)",
    only="sqlite",
)
# bm25 is the same number whichever of the two MATCH forms runs: its IDF counts rows over
# the whole index and the tag's column weighs 0.
_SCORES = Hot(
    "SELECT rowid, bm25(message_fts, 1.0, 1.0, 0.0) FROM message_fts"
    " WHERE message_fts MATCH :q AND rowid BETWEEN :lo AND :hi",
    only="sqlite",
)
_VISIBLE = Hot(
    "SELECT m.id, m.session_id FROM json_each(:ids) j"
    # CROSS JOIN pins the order, from the candidates outwards: left to the planner, it
    # walked every session of the owner instead (42 s at 100,000 sessions).
    " CROSS JOIN message m ON m.id = j.value"
    " CROSS JOIN session s ON s.id = m.session_id"
    " WHERE s.owner = :owner AND (:any_user OR s.end_user = :end_user)"
    " AND (m.active = TRUE OR m.compacted = TRUE)"
    " AND (:session_id IS NULL OR s.id = :session_id)",
    only="sqlite",  # json_each; PostgreSQL's search checks the scope in its own query
)
"""The authority over what the index's tag found: the session's owner and end user, and
the row's state (a retracted row is still in the index)."""


@dataclass(frozen=True, slots=True)
class _Scope:
    owned: str
    """The MATCH: the scope's tag and the terms."""
    terms: str
    """The MATCH: the terms alone."""
    values: dict[str, object]
    """The authority's parameters (`_VISIBLE`)."""


@dataclass(frozen=True, slots=True)
class _Round:
    hits: list[tuple[int, str, float]]
    """(id, session, score) of the caller's visible rows among the candidates."""
    oldest: int
    """The oldest candidate's id: the next round reads below it."""
    full: bool
    """As many candidates as asked for: older matches may remain."""


def _few_others(conn: Connection, scope: _Scope, ids: list[int]) -> bool:
    """Whether the candidates' id range holds few enough matches of the terms (of every
    scope) to score them all: at once when the range itself is that short."""
    lo, hi, room = ids[-1], ids[0], DENSE_SPAN * len(ids)
    if hi - lo < room:
        return True
    found = _IN_RANGE.run(conn, {"q": scope.terms, "lo": lo, "hi": hi, "n": room + 1})
    return int(found.fetchone()[0]) <= room


def _round(conn: Connection, scope: _Scope, below: int | None) -> _Round:
    """The next `CANDIDATES` matches of the scope, newest first, below the id `below`."""
    if below is None:
        found = _NEWEST.run(conn, {"owned": scope.owned, "n": CANDIDATES})
    else:
        found = _NEWEST_BELOW.run(conn, {"owned": scope.owned, "below": below, "n": CANDIDATES})
    ids = [int(r[0]) for r in found.fetchall()]
    if not ids:
        return _Round(hits=[], oldest=0, full=False)
    lo, hi = ids[-1], ids[0]
    q = scope.terms if _few_others(conn, scope, ids) else scope.owned
    scores = dict(_SCORES.run(conn, {"q": q, "lo": lo, "hi": hi}).fetchall())
    visible = dict(_VISIBLE.run(conn, {"ids": json.dumps(ids), **scope.values}).fetchall())
    hits = [(i, str(visible[i]), float(scores[i])) for i in ids if i in visible and i in scores]
    return _Round(hits=hits, oldest=lo, full=len(ids) == CANDIDATES)


def _best_per_session(conn: Connection, scope: _Scope, *, limit: int) -> list[tuple[int, str]]:
    """(message id, session) of each session's best hit among the newest candidates, best
    first; ties go to the most recent message, as they did when every match was ranked.
    Per session, not per message, so one chatty session cannot fill the page alone."""
    best: dict[str, tuple[float, int]] = {}
    below: int | None = None
    for _ in range(CANDIDATE_ROUNDS):
        found = _round(conn, scope, below)
        for message_id, session_id, score in found.hits:
            key = (score, -message_id)
            if session_id not in best or key < best[session_id]:
                best[session_id] = key
        if len(best) >= limit or not found.full:
            break
        below = found.oldest
    ranked = sorted(best.items(), key=lambda kv: kv[1])[:limit]
    return [(-key[1], session_id) for session_id, key in ranked]


_SHOWN = "id, session_id, role, content, api_content, tool_calls, active"
_EARLIER = Hot(
    f"SELECT {_SHOWN} FROM message WHERE session_id = :sid AND id < :id"
    " AND (active = TRUE OR compacted = TRUE) ORDER BY id DESC LIMIT :n"
)
_LATER = Hot(
    f"SELECT {_SHOWN} FROM message WHERE session_id = :sid AND id > :id"
    " AND (active = TRUE OR compacted = TRUE) ORDER BY id LIMIT :n"
)
_SNIPPETS = text(
    "SELECT rowid, snippet(message_fts, -1, '**', '**', '…', :tokens)"
    " FROM message_fts WHERE message_fts MATCH :q AND rowid IN :ids"
).bindparams(bindparam("ids", expanding=True))
_HIT_ROWS = text(
    f"SELECT {_SHOWN}, (SELECT started_at FROM session s WHERE s.id = m.session_id)"
    " FROM message m WHERE id IN :ids"
).bindparams(bindparam("ids", expanding=True))


def _window_message(row: Sequence[Any]) -> WindowMessage:
    return WindowMessage(
        id=int(row[0]), role=str(row[2]), text=_text_of(row[3], row[4], row[5]), archived=not row[6]
    )


def _around(
    conn: Connection, hit: Sequence[Any], *, before: int, after: int
) -> tuple[tuple[WindowMessage, ...], tuple[WindowMessage, ...]]:
    """The messages just before and just after a hit in its session, live or compacted."""
    where = {"sid": hit[1], "id": hit[0]}
    earlier = _EARLIER.run(conn, where | {"n": before}).fetchall() if before else []
    later = _LATER.run(conn, where | {"n": after}).fetchall() if after else []
    shown_before = tuple(_window_message(m) for m in reversed(earlier))
    return shown_before, tuple(_window_message(m) for m in later)


def _fts5_snippets(conn: Connection, ids: list[int], *, match: str) -> dict[int, str]:
    # Snippets only for the winners: snippet() re-tokenizes the row, too costly per hit.
    found = conn.execute(_SNIPPETS, {"q": match, "ids": ids, "tokens": _SNIPPET_TOKENS})
    return {int(r[0]): str(r[1] or "") for r in found}


def _hits(
    conn: Connection, ids: list[int], *, snippets: dict[int, str], before: int, after: int
) -> list[SearchHit]:
    rows = {int(r[0]): r for r in conn.execute(_HIT_ROWS, {"ids": ids})}
    hits: list[SearchHit] = []
    for message_id in ids:
        row = rows[message_id]
        earlier, later = _around(conn, row, before=before, after=after)
        hits.append(
            SearchHit(
                session_id=str(row[1]),
                session_started_at=float(row[7]),
                message_id=message_id,
                role=str(row[2]),
                archived=not row[6],
                snippet=snippets.get(message_id) or _text_of(row[3], row[4], row[5]),
                before=earlier,
                after=later,
            )
        )
    return hits


MAX_EXACT_TAGS = 16
"""A search across a key's end users names each one's tag while they are this few; past
that it takes every tag with the key's prefix. FTS5 answers a prefix by merging every
matching token's rows into one list first, without an index of prefixes: 40 ms for a key
with 400,000 messages, whatever the words and however few the matches."""
_NEXT_END_USER = Hot("SELECT min(end_user) FROM session WHERE owner = :owner AND end_user > :after")
_FIRST_END_USER = Hot("SELECT min(end_user) FROM session WHERE owner = :owner")


def _scope_tags(conn: Connection, *, owner: str, end_user: str | None) -> str:
    """The MATCH naming the scope's tags ("" when the key has no session at all): one end
    user's, or each of the key's end users' while they are few (one index seek each)."""
    if end_user is not None:
        return f'"{scope_tag(owner, end_user)}"'
    found: list[str] = []
    row = _FIRST_END_USER.run(conn, {"owner": owner}).fetchone()
    while row is not None and row[0] is not None:
        if len(found) == MAX_EXACT_TAGS:
            return f'"{scope_tag(owner, "")}" *'  # every end user's tag starts with the key's
        found.append(str(row[0]))
        row = _NEXT_END_USER.run(conn, {"owner": owner, "after": found[-1]}).fetchone()
    return " OR ".join(f'"{scope_tag(owner, user)}"' for user in found)


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

    Only the newest matches are ranked (`CANDIDATES`, up to `CANDIDATE_ROUNDS` rounds):
    the cost follows the page asked for, not everything the caller ever wrote. A word in
    more messages than that finds the best among the recent ones.

    Live and compacted rows match; retracted rows (active=0, compacted=0) neither match nor
    appear in a window, since retraction means the message should not have existed.
    `terms` are quoted here, so a caller cannot pass FTS syntax even by mistake. Waits on
    the store's writer thread (see `Store.searchable`): not for the event loop.
    """
    if not terms or limit < 1:
        return []
    store.searchable()  # the newest messages are indexed in batches: catch up first
    if store.engine.dialect.name == "postgresql":
        with store.reader() as conn:
            best = search_postgres.best_hits(
                conn,
                owner=owner,
                end_user=end_user,
                terms=terms,
                any_term=any_term,
                session_id=session_id,
                limit=limit,
                candidates=CANDIDATES * CANDIDATE_ROUNDS,
            )
            ids = [i for i, _ in best]
            marked = search_postgres.snippets(
                conn, ids=ids, terms=terms, any_term=any_term, words=_SNIPPET_TOKENS
            )
            return _hits(conn, ids, snippets=marked, before=before, after=after) if ids else []
    # The terms only ever match the text columns; the scope's tokens narrow the rows inside
    # the index, before anything is ranked.
    match = "{content api_content} : (" + _match_expression(terms, any_term=any_term) + ")"
    with store.reader() as conn:
        tags = _scope_tags(conn, owner=owner, end_user=end_user)
        if not tags:
            return []
        scope = _Scope(
            owned=f"owner_tag : ({tags}) AND {match}",
            terms=match,
            values={
                "owner": owner,
                "any_user": end_user is None,
                "end_user": end_user or "",
                "session_id": session_id,
            },
        )
        best = _best_per_session(conn, scope, limit=limit)
        if not best:
            return []
        ids = [i for i, _ in best]
        marked = _fts5_snippets(conn, ids, match=match)
        return _hits(conn, ids, snippets=marked, before=before, after=after)


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
