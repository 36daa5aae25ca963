"""The stored side of background responses: their row in `response_record` as it moves from
`queued` to a terminal status, and their stream events in `response_event_chunk`, so a
client resumes a stream by sequence number after a restart.

SQLAlchemy Core with portable SQL (no `INSERT OR REPLACE`): each write joins the caller's
`store.unit()` when there is one, so the opening, a flush of every running recording and
the final record are each one commit.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text
from sqlmodel import col, select

from app.db.session_models import ResponseRow
from app.db.store import Store

TERMINAL = ("completed", "failed", "cancelled", "incomplete")
"""Statuses a background response never leaves."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """Stream events of one response with sequence numbers `first_seq..`, each a JSON
    object as rendered."""

    response_id: str
    first_seq: int
    events: Sequence[str]


def insert_response(store: Store, row: ResponseRow) -> None:
    """A new background response's row (status `queued`), inside the turn's opening unit."""
    with store.session() as db:
        db.add(row)
        db.commit()


def append_chunks(store: Store, chunks: Sequence[Chunk], *, status: str | None = None) -> None:
    """Store each chunk and move its response's `events_through` on (and, when given, its
    status: `in_progress` once the turn runs)."""
    with store.begin() as conn:
        _append(conn, chunks, status)


def _append(conn: Connection, chunks: Sequence[Chunk], status: str | None) -> None:
    chunks = [c for c in chunks if c.events]
    if not chunks:
        return
    conn.execute(
        text(
            "INSERT INTO response_event_chunk (response_id, first_seq, last_seq, events) "
            "VALUES (:rid, :first, :last, :events)"
        ),
        [
            {
                "rid": c.response_id,
                "first": c.first_seq,
                "last": c.first_seq + len(c.events) - 1,
                "events": "[" + ",".join(c.events) + "]",
            }
            for c in chunks
        ],
    )
    for c in chunks:
        params: dict[str, Any] = {"rid": c.response_id, "last": c.first_seq + len(c.events) - 1}
        if status is None:
            sql = "UPDATE response_record SET events_through = :last WHERE id = :rid"
        else:
            # Never back from a terminal status: a flush racing the final record loses.
            sql = (
                "UPDATE response_record SET events_through = :last, status = :status "
                "WHERE id = :rid AND status NOT IN ('completed', 'failed', 'cancelled', "
                "'incomplete')"
            )
            params["status"] = status
        conn.execute(text(sql), params)


def finish_response(
    store: Store,
    *,
    response_id: str,
    body: dict[str, Any],
    last_message_id: int,
    tail: Chunk | None,
) -> None:
    """The final record: the terminal body and status, and the events not yet stored."""
    with store.begin() as conn:
        if tail is not None:
            _append(conn, [tail], None)
        conn.execute(
            text(
                "UPDATE response_record SET body = :body, status = :status, "
                "last_message_id = :last WHERE id = :rid"
            ),
            {
                "rid": response_id,
                "body": json.dumps(body),
                "status": body["status"],
                "last": last_message_id,
            },
        )


def unfinished(store: Store) -> list[ResponseRow]:
    """Background responses no process is finishing: read at startup, before any turn runs."""
    with store.session() as db:
        return list(
            db.exec(
                select(ResponseRow).where(
                    col(ResponseRow.background).is_(True),
                    col(ResponseRow.status).not_in(TERMINAL),
                )
            )
        )


def events_after(store: Store, *, response_id: str, after: int) -> list[str]:
    """The stored events with sequence numbers above `after`, in order, as JSON objects."""
    with store.reader() as conn:
        rows = conn.execute(
            text(
                "SELECT first_seq, events FROM response_event_chunk "
                "WHERE response_id = :rid AND last_seq > :after ORDER BY first_seq"
            ),
            {"rid": response_id, "after": after},
        ).all()
    out: list[str] = []
    for first_seq, events in rows:
        decoded: list[Any] = json.loads(events)
        skip = max(0, after + 1 - int(first_seq))
        out.extend(json.dumps(e, separators=(",", ":"), ensure_ascii=False) for e in decoded[skip:])
    return out
