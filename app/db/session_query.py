"""Queries behind the sessions API and the Responses API: listing, paging, retraction, purge.

They live beside `store/`, not in it, so the store's write path can be reworked without
touching them. Listing reads are batched per page (one query per kind of fact for all the
page's sessions), so a page of fifty sessions costs a handful of statements, not hundreds.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from sqlalchemy import bindparam, text, tuple_
from sqlmodel import Session, col, func, select

from app.db.chat_store import forget_index_from
from app.db.models import ApiCallRow, MessageRow, SessionRow, TurnRow
from app.db.raw import Hot
from app.db.session_models import ResponseRow, SessionRetractionRow
from app.db.store import Store
from app.db.tool_models import TodoListRow

TITLE_CHARS = 80

MessageState = Literal["live", "archived", "retracted"]


@dataclass(frozen=True, slots=True)
class SessionSummary:
    session: SessionRow
    title: str
    turns: int
    retracted: bool
    purged: bool
    calls: tuple[ApiCallRow, ...]
    """The session's usage ledger, oldest first, for cost and savings figures."""


@dataclass(frozen=True, slots=True)
class MessageView:
    row: MessageRow

    @property
    def state(self) -> MessageState:
        if self.row.active:
            return "live"
        return "archived" if self.row.compacted else "retracted"

    @property
    def images(self) -> list[str]:
        """sha256 keys of the row's images (stored once per session)."""
        return list(json.loads(self.row.images)) if self.row.images else []

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return list(json.loads(self.row.tool_calls)) if self.row.tool_calls else []


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _forgets_live(fn: _Fn) -> _Fn:
    """The store keeps a session's live log in memory; these change live rows under it,
    so it is dropped before (no stale read meanwhile) and after (none cached mid-way)."""

    @functools.wraps(fn)
    def wrapper(store: Store, *args: Any, session_id: str, **kwargs: Any) -> Any:
        store.forget_live(session_id)
        try:
            return fn(store, *args, session_id=session_id, **kwargs)
        finally:
            store.forget_live(session_id)

    return wrapper  # type: ignore[return-value]


def title_of(text_value: str | None) -> str:
    flat = " ".join((text_value or "").split())
    return flat if len(flat) <= TITLE_CHARS else flat[: TITLE_CHARS - 1].rstrip() + "…"


def _titles(db: Session, ids: Sequence[str]) -> dict[str, str]:
    # The first user message of each session, whatever its state: a retracted session
    # still needs a name in an operator's listing.
    firsts = (
        db.connection()
        .execute(
            text(
                "SELECT m.session_id, m.content FROM message m JOIN ("
                " SELECT session_id, MIN(id) AS id FROM message"
                " WHERE role = 'user' AND kind IS NULL AND session_id IN :ids"
                " GROUP BY session_id) f ON f.id = m.id"
            ).bindparams(bindparam("ids", expanding=True)),
            {"ids": list(ids)},
        )
        .all()
    )
    return {str(r[0]): title_of(r[1]) for r in firsts}


def titles(store: Store, *, session_ids: Sequence[str]) -> dict[str, str]:
    if not session_ids:
        return {}
    with Session(store.engine) as db:
        return _titles(db, session_ids)


def _summaries(db: Session, sessions: Sequence[SessionRow]) -> list[SessionSummary]:
    if not sessions:
        return []
    ids = [s.id for s in sessions]
    titles = _titles(db, ids)
    turn_counts = dict(
        db.exec(
            select(TurnRow.session_id, func.count())
            .where(col(TurnRow.session_id).in_(ids))
            .group_by(col(TurnRow.session_id))
        ).all()
    )
    retractions = {
        r.session_id: r
        for r in db.exec(
            select(SessionRetractionRow).where(col(SessionRetractionRow.session_id).in_(ids))
        ).all()
    }
    calls: dict[str, list[ApiCallRow]] = {sid: [] for sid in ids}
    for call in db.exec(
        select(ApiCallRow).where(col(ApiCallRow.session_id).in_(ids)).order_by(col(ApiCallRow.id))
    ).all():
        calls[call.session_id].append(call)
    return [
        SessionSummary(
            session=s,
            title=titles.get(s.id, ""),
            turns=int(turn_counts.get(s.id, 0)),
            retracted=s.id in retractions,
            purged=s.id in retractions and retractions[s.id].purged,
            calls=tuple(calls[s.id]),
        )
        for s in sessions
    ]


class UnknownCursor(Exception):
    """A listing's cursor names no session of that listing: forged, mistyped, or another
    owner's (told apart from none by nobody, so ids cannot be probed through it)."""


def _anchor(
    db: Session, *, before: str, owner: str | None, end_user: str | None
) -> tuple[float, str]:
    """(started_at, id) of the cursor's session, read only within the listing's scope."""
    query = select(SessionRow.started_at, SessionRow.id).where(SessionRow.id == before)
    if owner is not None:
        query = query.where(SessionRow.owner == owner)
    if end_user is not None:
        query = query.where(SessionRow.end_user == end_user)
    found = db.exec(query).first()
    if found is None:
        raise UnknownCursor(before)
    return float(found[0]), str(found[1])


def list_sessions(
    store: Store,
    *,
    owner: str | None,
    limit: int,
    before: str | None = None,
    include_retracted: bool = False,
    end_user: str | None = None,
) -> tuple[list[SessionSummary], bool]:
    """A page of sessions, newest first, and whether more follow.

    `owner=None` lists every principal's sessions (the admin view); `end_user` narrows it
    to one end user's (None: every end user's). `before` is the id of the last session of
    the previous page; ordering is (started_at, id) descending, so sessions started in the
    same instant still page without repeats or gaps. A `before` outside this listing's
    scope raises `UnknownCursor`, whether it exists elsewhere or not.

    With an owner, a page walks `ix_session_owner_started` (or its end-user twin) from the
    cursor: the bound is a row value, which SQLite seeks to; written as `a < x OR (a = x
    AND id < y)` it walked every entry newer than the cursor (12.9 ms against 0.04 ms 50,000
    sessions deep). The admin's listing across owners has no index of its own: rare, and
    an index on (started_at, id) would cost every new session's insert for it.
    """
    with Session(store.engine, expire_on_commit=False) as db:
        query = select(SessionRow)
        if owner is not None:
            query = query.where(SessionRow.owner == owner)
        if end_user is not None:
            query = query.where(SessionRow.end_user == end_user)
        if not include_retracted:
            retracted = select(SessionRetractionRow.session_id)
            query = query.where(col(SessionRow.id).not_in(retracted))
        if before is not None:
            anchor = _anchor(db, before=before, owner=owner, end_user=end_user)
            query = query.where(
                tuple_(col(SessionRow.started_at), col(SessionRow.id)) < tuple_(*anchor)
            )
        rows = db.exec(
            query.order_by(col(SessionRow.started_at).desc(), col(SessionRow.id).desc()).limit(
                limit + 1
            )
        ).all()
        page = list(rows[:limit])
        return _summaries(db, page), len(rows) > limit


def session_summary(store: Store, *, session_id: str) -> SessionSummary | None:
    with Session(store.engine, expire_on_commit=False) as db:
        row = db.get(SessionRow, session_id)
        if row is None:
            return None
        return _summaries(db, [row])[0]


_RETRACTED = Hot("SELECT 1 FROM session_retraction WHERE session_id = :sid")


def is_retracted(store: Store, *, session_id: str) -> bool:
    """Asked by every request that names its session: a DBAPI read (the ORM's get, on a
    connection of its own, was a third of a continued turn's opening unit)."""
    with store.reader() as conn:
        return _RETRACTED.run(conn, {"sid": session_id}).fetchone() is not None


def messages_page(
    store: Store, *, session_id: str, after: int | None, limit: int
) -> tuple[list[MessageView], bool]:
    """Every row of a session (live, archived and retracted), oldest first, paged by id."""
    with Session(store.engine, expire_on_commit=False) as db:
        query = select(MessageRow).where(MessageRow.session_id == session_id)
        if after is not None:
            query = query.where(col(MessageRow.id) > after)
        rows = db.exec(query.order_by(col(MessageRow.id)).limit(limit + 1)).all()
        return [MessageView(r) for r in rows[:limit]], len(rows) > limit


def live_messages_through(store: Store, *, session_id: str, message_id: int) -> list[MessageRow]:
    """The live rows of a session up to and including `message_id`, for a fork."""
    with Session(store.engine, expire_on_commit=False) as db:
        return list(
            db.exec(
                select(MessageRow)
                .where(
                    MessageRow.session_id == session_id,
                    col(MessageRow.active).is_(True),
                    col(MessageRow.id) <= message_id,
                )
                .order_by(col(MessageRow.id))
            ).all()
        )


def max_message_id(store: Store, *, session_id: str) -> int:
    with Session(store.engine) as db:
        found = db.exec(
            select(func.max(MessageRow.id)).where(MessageRow.session_id == session_id)
        ).one()
        return int(found or 0)


@_forgets_live
def retract_session(store: Store, *, session_id: str) -> None:
    """Hide a session from its owner: every row becomes retracted (active=0, compacted=0),
    which also keeps it out of full-text search, and the session is marked. Nothing is
    deleted. Flags are not text columns, so the FTS triggers do no work."""
    with Session(store.engine) as db:
        conn = db.connection()
        conn.execute(
            text("UPDATE message SET active = FALSE, compacted = FALSE WHERE session_id = :sid"),
            {"sid": session_id},
        )
        conn.execute(
            text("UPDATE response_record SET retracted = TRUE WHERE session_id = :sid"),
            {"sid": session_id},
        )
        # The continuity index is derived data: without this, a client resending the
        # retracted conversation would be matched to it and continue it.
        conn.execute(
            text("DELETE FROM transcript_key WHERE session_id = :sid"), {"sid": session_id}
        )
        if db.get(SessionRetractionRow, session_id) is None:
            db.add(SessionRetractionRow(session_id=session_id))
        db.commit()


@_forgets_live
def purge_session(store: Store, *, session_id: str) -> None:
    """Hard-delete a session's transcript, turns, images, continuity index, todo list,
    stored responses and the app's names for it.

    The session row and its usage ledger stay: spend caps and billing count every call a
    key made, so deleting them would hand a key its budget back. The row keeps no text.
    """
    with Session(store.engine) as db:
        conn = db.connection()
        # A background response's stored stream events hold its text too.
        conn.execute(
            text(
                "DELETE FROM response_event_chunk WHERE response_id IN "
                "(SELECT id FROM response_record WHERE session_id = :sid)"
            ),
            {"sid": session_id},
        )
        for table in (
            "message",
            "turn",
            "response_record",
            "transcript_key",
            "session_image",
            "named_chat",
        ):
            conn.execute(text(f"DELETE FROM {table} WHERE session_id = :sid"), {"sid": session_id})
        todo = db.get(TodoListRow, session_id)
        if todo is not None:
            db.delete(todo)
        conn.execute(
            text(
                "UPDATE session SET system_prompt = '', client_instructions = '[]', "
                "tool_snapshot = '[]' WHERE id = :sid"
            ),
            {"sid": session_id},
        )
        mark = db.get(SessionRetractionRow, session_id)
        if mark is None:
            db.add(SessionRetractionRow(session_id=session_id, purged=True))
        else:
            mark.purged = True
            mark.retracted_at = time.time()
            db.add(mark)
        db.commit()


@_forgets_live
def retract_messages(
    store: Store, *, session_id: str, lease: str, first_id: int, last_id: int
) -> int:
    """Retract one exchange's rows (a deleted response) from the live view, fenced by the
    caller's turn lease so it cannot race a running turn. Returns the rows changed."""
    with Session(store.engine) as db:
        conn = db.connection()
        fence = conn.execute(
            text("UPDATE session SET updated_at = :now WHERE id = :sid AND lease = :lease"),
            {"now": time.time(), "sid": session_id, "lease": lease},
        )
        if getattr(fence, "rowcount", 0) != 1:
            db.rollback()
            return 0
        changed = conn.execute(
            text(
                "UPDATE message SET active = FALSE, compacted = FALSE "
                "WHERE session_id = :sid AND id BETWEEN :first AND :last AND active = TRUE"
            ),
            {"sid": session_id, "first": first_id, "last": last_id},
        )
        forget_index_from(conn, session_id=session_id, first_row_id=first_id)
        db.commit()
        return int(getattr(changed, "rowcount", 0))


@_forgets_live
def delete_messages(
    store: Store, *, session_id: str, lease: str, first_id: int, last_id: int
) -> int:
    """Hard-delete one exchange's rows (a `store: false` response), fenced by the lease."""
    with Session(store.engine) as db:
        conn = db.connection()
        fence = conn.execute(
            text("UPDATE session SET updated_at = :now WHERE id = :sid AND lease = :lease"),
            {"now": time.time(), "sid": session_id, "lease": lease},
        )
        if getattr(fence, "rowcount", 0) != 1:
            db.rollback()
            return 0
        gone = conn.execute(
            text("DELETE FROM message WHERE session_id = :sid AND id BETWEEN :first AND :last"),
            {"sid": session_id, "first": first_id, "last": last_id},
        )
        forget_index_from(conn, session_id=session_id, first_row_id=first_id)
        db.commit()
        return int(getattr(gone, "rowcount", 0))


# --------------------------------------------------------------------------- responses


def save_response(store: Store, row: ResponseRow) -> None:
    with Session(store.engine) as db:
        db.merge(row)
        db.commit()


def get_response(store: Store, *, response_id: str) -> ResponseRow | None:
    with Session(store.engine, expire_on_commit=False) as db:
        return db.get(ResponseRow, response_id)


def latest_response(store: Store, *, session_id: str) -> ResponseRow | None:
    """The newest live response of a session: the only one a continuation may follow."""
    with Session(store.engine, expire_on_commit=False) as db:
        return db.exec(
            select(ResponseRow)
            .where(ResponseRow.session_id == session_id, col(ResponseRow.retracted).is_(False))
            .order_by(col(ResponseRow.created_at).desc(), col(ResponseRow.last_message_id).desc())
            .limit(1)
        ).first()


def mark_response_retracted(store: Store, *, response_id: str) -> None:
    with Session(store.engine) as db:
        db.connection().execute(
            text("UPDATE response_record SET retracted = TRUE WHERE id = :rid"),
            {"rid": response_id},
        )
        db.commit()
