"""SQL for the drop-in chat path: the visible-transcript index, retraction of a diverged
branch, and images stored once per session.

Kept beside `store.py` because nothing outside `app/db/` writes SQL; the policy (what is
visible, how it is hashed, when to continue) lives in `app/agent/opening/continuity.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, text

from app.db.raw import Hot
from app.db.store import Store


@dataclass(frozen=True, slots=True)
class TranscriptKey:
    prefix_hash: str
    position: int
    last_row_id: int | None
    """The newest message row the key covers; None: the session's newest when indexed
    (read by the insert itself, where a separate `MAX(id)` read was one more statement)."""


@dataclass(frozen=True, slots=True)
class Continuation:
    session_id: str
    position: int
    last_row_id: int
    compactions: int
    stored_len: int
    """How many visible messages the session holds now: more than `position` means the
    request diverges from it there."""


@dataclass(frozen=True, slots=True)
class StoredImage:
    sha256: str
    media_type: str
    data: str
    url: str


_SELECT_KEYS = (
    "SELECT k.session_id, k.position, k.last_row_id, k.compactions, s.transcript_len "
    "FROM transcript_key k JOIN session s ON s.id = k.session_id WHERE k.prefix_hash IN :hashes"
)
_ORDER = " ORDER BY k.position DESC, k.id DESC LIMIT :limit"
_FIND = text(_SELECT_KEYS + _ORDER).bindparams(bindparam("hashes", expanding=True))
_FIND_IN = text(_SELECT_KEYS + " AND k.session_id = :sid" + _ORDER).bindparams(
    bindparam("hashes", expanding=True)
)


NEWEST_FIRST = 8
"""How many of a request's newest hashes are looked up before all of them."""


def find_continuations(
    store: Store, *, hashes: Sequence[str], limit: int = 16, session_id: str | None = None
) -> list[Continuation]:
    """Stored conversations sharing a visible prefix with `hashes`, longest first (only
    `session_id`'s when given: a conversation the request named).

    The hashes are rolling (each covers every message before it, and the principal's
    scope), so one indexed IN lookup finds the longest matches without scanning sessions.

    A client resends its whole history, and looking all of it up cost 1.9 ms at 500
    messages. Nearly always the request extends a stored conversation by a message or
    two, so the newest hashes are looked up first. The caller takes the longest match the
    request simply extends (`stored_len == position`), else the longest: when the newest
    hashes give such a match, or a full page of longer matches, the older hashes cannot
    change the answer, and only otherwise are they looked up too.
    """
    if not hashes:
        return []
    found = _find(store, hashes[-NEWEST_FIRST:], limit, session_id)
    settled = len(found) == limit or any(c.stored_len == c.position for c in found)
    if len(hashes) <= NEWEST_FIRST or settled:
        return found
    return _find(store, hashes, limit, session_id)


def _find(
    store: Store, hashes: Sequence[str], limit: int, session_id: str | None
) -> list[Continuation]:
    params = {"hashes": list(hashes), "limit": limit, "sid": session_id}
    with store.session() as db:
        rows = db.connection().execute(_FIND if session_id is None else _FIND_IN, params).all()
    return [Continuation(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4] or 0)) for r in rows]


_NAMED = Hot(
    "SELECT session_id FROM named_chat WHERE owner = :owner AND end_user = :end_user"
    " AND name = :name"
)
_NAME = Hot(
    "INSERT INTO named_chat (owner, end_user, name, session_id, created_at)"
    " VALUES (:owner, :end_user, :name, :sid, :now)"
    " ON CONFLICT (owner, end_user, name) DO UPDATE SET session_id = excluded.session_id"
)


def named_session(store: Store, *, owner: str, end_user: str, name: str) -> str | None:
    """The session an app's conversation name points at, under this key and end user."""
    with store.reader() as conn:
        found = _NAMED.run(conn, {"owner": owner, "end_user": end_user, "name": name}).fetchone()
    return None if found is None else str(found[0])


def name_session(store: Store, *, owner: str, end_user: str, name: str, session_id: str) -> None:
    """Point an app's conversation name at a session (replacing where it pointed)."""
    values = {"owner": owner, "end_user": end_user, "name": name, "sid": session_id}
    with store.begin() as conn:
        _NAME.run(conn, values | {"now": time.time()})


# Every turn that shows the client something runs these (app/db/raw.py).
_ADD_KEYS = Hot(
    "INSERT INTO transcript_key "
    "(prefix_hash, session_id, position, last_row_id, compactions, created_at) "
    # CAST: `:sid` is both a selected value and compared with a VARCHAR column; PostgreSQL
    # types each parameter once and refused the two uses (inconsistent types deduced).
    "SELECT :h, CAST(:sid AS VARCHAR), :pos, COALESCE(CAST(:row AS INTEGER), "
    "(SELECT MAX(id) FROM message WHERE message.session_id = :sid), 0), compactions, :now "
    "FROM session WHERE id = :sid"
)
_MOVE_HEAD = Hot("UPDATE session SET transcript_head = :h, transcript_len = :n WHERE id = :sid")
_LAST_ROW = Hot("SELECT MAX(id) FROM message WHERE session_id = :sid")


def index_transcript(
    store: Store,
    *,
    session_id: str,
    keys: Sequence[TranscriptKey],
    head: str,
    length: int,
    move_head: bool = True,
) -> None:
    """Add visible messages to the index and move the session's transcript head (unless
    the caller wrote it already: a new session's insert carries it)."""
    if not keys:
        return
    with store.begin() as conn:
        # The session's compaction count is read by the insert itself: one statement.
        _ADD_KEYS.run_many(
            conn,
            [
                {
                    "h": k.prefix_hash,
                    "sid": session_id,
                    "pos": k.position,
                    "row": k.last_row_id,
                    "now": time.time(),
                }
                for k in keys
            ],
        )
        if move_head:
            _MOVE_HEAD.run(conn, {"h": head, "n": length, "sid": session_id})
    if move_head:
        store.session_written(session_id, transcript_head=head, transcript_len=length)


def last_row_id(store: Store, *, session_id: str) -> int:
    with store.reader() as conn:
        found = _LAST_ROW.run(conn, {"sid": session_id}).fetchone()
    return int(found[0] or 0) if found is not None else 0


def retract_after(
    store: Store,
    *,
    session_id: str,
    lease: str,
    after_row_id: int,
    keep_position: int,
    head: str | None,
) -> int:
    """Take every live row after `after_row_id` out of the model's view (`active=0,
    compacted=0`: retracted, kept, not searchable) and forget the index entries past
    `keep_position`, in one transaction fenced by the turn lease. Returns rows retracted."""
    with store.session() as db:
        try:
            store._fenced(db, session_id=session_id, lease=lease)
            conn = db.connection()
            result = conn.execute(
                text(
                    "UPDATE message SET active = FALSE, compacted = FALSE "
                    "WHERE session_id = :sid AND id > :after AND active = TRUE"
                ),
                {"sid": session_id, "after": after_row_id},
            )
            conn.execute(
                text("DELETE FROM transcript_key WHERE session_id = :sid AND position > :keep"),
                {"sid": session_id, "keep": keep_position},
            )
            conn.execute(
                text(
                    "UPDATE session SET transcript_head = :h, transcript_len = :n WHERE id = :sid"
                ),
                {"h": head, "n": keep_position, "sid": session_id},
            )
            db.commit()
        except Exception:
            db.rollback()
            raise
    # The store keeps a leased session's live log in memory: a retraction rewrites it.
    store.forget_live(session_id)
    return int(getattr(result, "rowcount", 0))


def forget_index_from(conn: Connection, *, session_id: str, first_row_id: int) -> None:
    """Rows from `first_row_id` on left the conversation (a deleted response): forget the
    index entries that reach them and move the head back to the last one left, or a
    client resending the old transcript would continue past rows it can no longer see."""
    conn.execute(
        text("DELETE FROM transcript_key WHERE session_id = :sid AND last_row_id >= :first"),
        {"sid": session_id, "first": first_row_id},
    )
    conn.execute(
        text(
            "UPDATE session SET "
            "transcript_head = (SELECT prefix_hash FROM transcript_key WHERE session_id = :sid "
            "ORDER BY position DESC LIMIT 1), "
            "transcript_len = COALESCE((SELECT MAX(position) FROM transcript_key "
            "WHERE session_id = :sid), 0) WHERE id = :sid"
        ),
        {"sid": session_id},
    )


def put_images(store: Store, *, session_id: str, images: Sequence[StoredImage]) -> None:
    """Store each image once per session; a re-sent image costs no new row."""
    if not images:
        return
    with store.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO session_image "
                "(session_id, sha256, media_type, data, url, created_at) "
                "VALUES (:sid, :sha, :mt, :data, :url, :now) ON CONFLICT DO NOTHING"
            ),
            [
                {
                    "sid": session_id,
                    "sha": i.sha256,
                    "mt": i.media_type,
                    "data": i.data,
                    "url": i.url,
                    "now": time.time(),
                }
                for i in images
            ],
        )


def session_images(store: Store, *, session_id: str) -> dict[str, StoredImage]:
    with store.session() as db:
        rows = db.connection().execute(
            text("SELECT sha256, media_type, data, url FROM session_image WHERE session_id = :sid"),
            {"sid": session_id},
        )
        return {str(r[0]): StoredImage(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows}
