"""The store API: the only code that writes SQL. Every function takes keyword arguments.

Every write on a session's log goes through `_fenced`, which touches the session row with
a conditional UPDATE on the turn lease inside the same transaction as the write. The
UPDATE takes SQLite's write lock first, so a turn that lost its lease can never append
after a newer turn started: missing or foreign lease means deny.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlmodel import Session, col, func, select

from app.db.engine import make_engine
from app.db.models import ApiCallRow, MessageRow, SessionRow, TurnRow


class LeaseLost(Exception):
    """The turn no longer holds the session's lease; its writes are refused."""


class PersistenceError(Exception):
    """A write failed; the caller ends the turn rather than act on unrecorded intent."""


@dataclass(frozen=True, slots=True)
class NewMessage:
    role: str
    content: str | None = None
    tool_calls: Sequence[dict[str, str]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    reasoning: str | None = None
    api_content: str | None = None
    kind: str | None = None
    images: tuple[str, ...] = ()
    """sha256 keys of images stored once per session (`put_images`)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    id: int
    role: str
    content: str | None
    api_content: str | None
    tool_calls: tuple[dict[str, str], ...]
    tool_call_id: str | None
    tool_name: str | None
    is_error: bool
    turn_id: str | None
    kind: str | None = None
    images: tuple[str, ...] = ()

    def as_new(self, **changes: object) -> NewMessage:
        """A copy of this row for re-insertion (compaction re-inserts the tail)."""
        fields: dict[str, object] = {
            "role": self.role,
            "content": self.content,
            "api_content": self.api_content,
            "tool_calls": list(self.tool_calls) or None,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "is_error": self.is_error,
            "kind": self.kind,
            "images": self.images,
        }
        fields.update(changes)
        return NewMessage(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class ApiCallRecord:
    profile: str
    upstream_model: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    reasoning_tokens: int
    cost_usd: Decimal | None
    cost_status: str
    cost_source: str
    latency_ms: float
    ttft_ms: float | None
    outcome: str
    cache_break: str | None = None


def _message_row(m: NewMessage, *, session_id: str, turn_id: str | None) -> MessageRow:
    return MessageRow(
        session_id=session_id,
        turn_id=turn_id,
        role=m.role,
        content=m.content,
        api_content=m.api_content,
        tool_calls=json.dumps(list(m.tool_calls)) if m.tool_calls else None,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
        is_error=m.is_error,
        reasoning=m.reasoning,
        kind=m.kind,
        images=json.dumps(list(m.images)) if m.images else None,
    )


def _stored(row: MessageRow) -> StoredMessage:
    assert row.id is not None
    calls: tuple[dict[str, str], ...] = tuple(json.loads(row.tool_calls)) if row.tool_calls else ()
    return StoredMessage(
        id=row.id,
        role=row.role,
        content=row.content,
        api_content=row.api_content,
        tool_calls=calls,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        is_error=row.is_error,
        turn_id=row.turn_id,
        kind=row.kind,
        images=tuple(json.loads(row.images)) if row.images else (),
    )


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, db_path: Path) -> Store:
        return cls(make_engine(db_path))

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as db:
            try:
                yield db
                db.commit()
            except Exception:
                db.rollback()
                raise

    def _fenced(self, db: Session, *, session_id: str, lease: str) -> None:
        now = time.time()
        result = db.connection().execute(
            text("UPDATE session SET updated_at = :now WHERE id = :sid AND lease = :lease"),
            {"now": now, "sid": session_id, "lease": lease},
        )
        if getattr(result, "rowcount", 0) != 1:
            raise LeaseLost(f"turn lease for session {session_id} is not held")

    # ------------------------------------------------------------------ sessions

    def create_session(
        self,
        *,
        session_id: str,
        owner: str,
        profile: str,
        system_prompt: str,
        tool_snapshot: str = "[]",
        client_tools: str = "[]",
        client_instructions: Sequence[str] = (),
        lease: str | None = None,
        lease_ttl_s: float = 0.0,
        messages: Sequence[NewMessage] = (),
    ) -> SessionRow:
        """Create a session, optionally already leased and holding its first messages, in
        one transaction: a crash can never leave a half-made session behind."""
        row = SessionRow(
            id=session_id,
            owner=owner,
            profile=profile,
            system_prompt=system_prompt,
            tool_snapshot=tool_snapshot,
            client_tools=client_tools,
            client_instructions=json.dumps(list(client_instructions)),
            lease=lease,
            lease_expires_at=time.time() + lease_ttl_s if lease else None,
        )
        with self._tx() as db:
            db.add(row)
            db.flush()
            db.add_all(_message_row(m, session_id=session_id, turn_id=None) for m in messages)
        return row

    def set_tool_snapshot(self, *, session_id: str, lease: str, snapshot: str, reason: str) -> None:
        """Replace the tool snapshot and mark the next request as a deliberate cache break."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            db.connection().execute(
                text(
                    "UPDATE session SET tool_snapshot = :snap, pending_cache_break = :reason "
                    "WHERE id = :sid"
                ),
                {"snap": snapshot, "reason": reason, "sid": session_id},
            )

    def get_session(self, *, session_id: str) -> SessionRow | None:
        with Session(self.engine, expire_on_commit=False) as db:
            return db.get(SessionRow, session_id)

    def acquire_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        """Take the session's turn lease if it is free or expired."""
        now = time.time()
        with self._tx() as db:
            result = db.connection().execute(
                text(
                    "UPDATE session SET lease = :lease, lease_expires_at = :exp "
                    "WHERE id = :sid AND (lease IS NULL OR lease_expires_at < :now)"
                ),
                {"lease": lease, "exp": now + ttl_s, "sid": session_id, "now": now},
            )
            return getattr(result, "rowcount", 0) == 1

    def renew_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        with self._tx() as db:
            result = db.connection().execute(
                text(
                    "UPDATE session SET lease_expires_at = :exp WHERE id = :sid AND lease = :lease"
                ),
                {"exp": time.time() + ttl_s, "sid": session_id, "lease": lease},
            )
            return getattr(result, "rowcount", 0) == 1

    def release_lease(self, *, session_id: str, lease: str) -> None:
        with self._tx() as db:
            db.connection().execute(
                text(
                    "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                    "WHERE id = :sid AND lease = :lease"
                ),
                {"sid": session_id, "lease": lease},
            )

    def clear_all_leases(self) -> int:
        """At startup: a lease left by a killed process would block its session until expiry."""
        with self._tx() as db:
            result = db.connection().execute(
                text(
                    "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                    "WHERE lease IS NOT NULL"
                )
            )
            return int(getattr(result, "rowcount", 0))

    # ------------------------------------------------------------------ messages

    def append_messages(
        self,
        *,
        session_id: str,
        lease: str,
        turn_id: str | None,
        messages: Sequence[NewMessage],
    ) -> list[int]:
        rows = [_message_row(m, session_id=session_id, turn_id=turn_id) for m in messages]
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            db.add_all(rows)
            db.flush()
            ids = [r.id for r in rows]
        return [i for i in ids if i is not None]

    def set_api_content(
        self, *, session_id: str, lease: str, message_id: int, api_content: str
    ) -> None:
        """Give a row a model-facing text different from its display text."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            db.connection().execute(
                text("UPDATE message SET api_content = :api WHERE id = :mid AND session_id = :sid"),
                {"api": api_content, "mid": message_id, "sid": session_id},
            )

    def rewrite_live(
        self,
        *,
        session_id: str,
        lease: str,
        archive_ids: Sequence[int],
        insert: Sequence[NewMessage],
        session_updates: dict[str, Any],
    ) -> None:
        """Compaction and prune commit: archive rows, insert their replacements, update the
        session's counters, all in one transaction checked against the turn lease.

        Nothing is deleted: archived rows become `active=0, compacted=1` and stay
        searchable. The flags are not text columns, so the FTS triggers do no work.
        """
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            if archive_ids:
                db.connection().execute(
                    text(
                        "UPDATE message SET active = 0, compacted = 1 "
                        "WHERE session_id = :sid AND id IN ("
                        + ",".join(str(int(i)) for i in archive_ids)
                        + ")"
                    ),
                    {"sid": session_id},
                )
            db.add_all(_message_row(m, session_id=session_id, turn_id=None) for m in insert)
            session = db.get(SessionRow, session_id)
            assert session is not None
            for key, value in session_updates.items():
                setattr(session, key, value)
            db.add(session)

    def set_client_context(
        self,
        *,
        session_id: str,
        lease: str,
        values: dict[str, Any],
        cache_break: str | None,
    ) -> None:
        """Record a changed client tool set or instructions, and name the cache break the
        next request deliberately makes because of it."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            session = db.get(SessionRow, session_id)
            assert session is not None
            for key, value in values.items():
                setattr(session, key, value)
            if cache_break is not None:
                session.pending_cache_break = cache_break
            db.add(session)

    def update_session(self, *, session_id: str, **values: Any) -> None:
        """Persist compressor counters (not fenced: a verdict must land even late)."""
        with self._tx() as db:
            session = db.get(SessionRow, session_id)
            if session is None:
                return
            for key, value in values.items():
                setattr(session, key, value)
            db.add(session)

    def get_message(self, *, session_id: str, message_id: int) -> StoredMessage | None:
        """One row of a session, live or archived (not retracted)."""
        with Session(self.engine) as db:
            row = db.get(MessageRow, message_id)
            if row is None or row.session_id != session_id:
                return None
            if not row.active and not row.compacted:
                return None
            return _stored(row)

    def active_messages(self, *, session_id: str) -> list[StoredMessage]:
        with Session(self.engine) as db:
            rows = db.exec(
                select(MessageRow)
                .where(MessageRow.session_id == session_id, col(MessageRow.active).is_(True))
                .order_by(col(MessageRow.id))
            ).all()
            return [_stored(r) for r in rows]

    def search_messages(
        self, *, session_id: str, query: str, limit: int = 20
    ) -> list[StoredMessage]:
        """Full-text search over live and compacted (not retracted) messages of a session."""
        with Session(self.engine) as db:
            ids = (
                db.connection()
                .execute(
                    text(
                        "SELECT m.id FROM message_fts f JOIN message m ON m.id = f.rowid "
                        "WHERE message_fts MATCH :q AND m.session_id = :sid "
                        "AND (m.active = 1 OR m.compacted = 1) ORDER BY m.id LIMIT :limit"
                    ),
                    {"q": query, "sid": session_id, "limit": limit},
                )
                .scalars()
            )
            wanted = list(ids)
            if not wanted:
                return []
            rows = db.exec(
                select(MessageRow)
                .where(col(MessageRow.id).in_(wanted))
                .order_by(col(MessageRow.id))
            ).all()
            return [_stored(r) for r in rows]

    # ------------------------------------------------------------------ turns

    def start_turn(self, *, session_id: str, lease: str, turn_id: str) -> None:
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            db.add(TurnRow(id=turn_id, session_id=session_id))

    def finish_turn(
        self, *, turn_id: str, exit_reason: str, iterations: int, error: str | None = None
    ) -> None:
        # Not fenced: recording why a turn ended must succeed even after its lease is gone.
        with self._tx() as db:
            row = db.get(TurnRow, turn_id)
            if row is None:
                return
            row.finished_at = time.time()
            row.exit_reason = exit_reason
            row.iterations = iterations
            row.error = error
            db.add(row)

    def get_turn(self, *, turn_id: str) -> TurnRow | None:
        with Session(self.engine, expire_on_commit=False) as db:
            return db.get(TurnRow, turn_id)

    # ------------------------------------------------------------------ usage ledger

    def record_api_call(
        self, *, session_id: str, owner: str, turn_id: str, call: ApiCallRecord
    ) -> None:
        """One row per upstream call, and the session's roll-up, in one transaction."""
        row = ApiCallRow(
            session_id=session_id,
            turn_id=turn_id,
            owner=owner,
            profile=call.profile,
            upstream_model=call.upstream_model,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cache_read_tokens=call.cache_read_tokens,
            cache_write_tokens=call.cache_write_tokens,
            reasoning_tokens=call.reasoning_tokens,
            cost_usd=str(call.cost_usd) if call.cost_usd is not None else None,
            cost_status=call.cost_status,
            cost_source=call.cost_source,
            latency_ms=call.latency_ms,
            ttft_ms=call.ttft_ms,
            outcome=call.outcome,
            cache_break=call.cache_break,
        )
        with self._tx() as db:
            db.add(row)
            session = db.get(SessionRow, session_id)
            if session is None:
                return
            if call.cache_break is not None and session.pending_cache_break == call.cache_break:
                session.pending_cache_break = None
            session.input_tokens += call.input_tokens
            session.output_tokens += call.output_tokens
            session.cache_read_tokens += call.cache_read_tokens
            session.cache_write_tokens += call.cache_write_tokens
            session.reasoning_tokens += call.reasoning_tokens
            session.upstream_calls += 1
            if call.cost_usd is None:
                if call.cost_status == "unknown":
                    session.cost_unknown_calls += 1
            else:
                session.cost_usd = str(Decimal(session.cost_usd) + call.cost_usd)
            db.add(session)

    def api_calls(
        self, *, session_id: str, limit: int = 100, offset: int = 0
    ) -> tuple[list[ApiCallRow], int]:
        with Session(self.engine, expire_on_commit=False) as db:
            rows = db.exec(
                select(ApiCallRow)
                .where(ApiCallRow.session_id == session_id)
                .order_by(col(ApiCallRow.id))
                .offset(offset)
                .limit(limit)
            ).all()
            total = db.exec(
                select(func.count())
                .select_from(ApiCallRow)
                .where(ApiCallRow.session_id == session_id)
            ).one()
            return list(rows), int(total)

    def spent_by_owner(self, *, owner: str, since: float | None = None) -> tuple[Decimal, int]:
        """Known spend and the number of unpriced calls for one API key, optionally windowed."""
        with Session(self.engine) as db:
            query = select(ApiCallRow.cost_usd).where(ApiCallRow.owner == owner)
            if since is not None:
                query = query.where(col(ApiCallRow.created_at) >= since)
            total = Decimal(0)
            unknown = 0
            for cost in db.exec(query).all():
                if cost is None:
                    unknown += 1
                else:
                    total += Decimal(cost)
            return total, unknown

    def debug_dump(self, *, session_id: str) -> list[dict[str, Any]]:
        """Every message row of a session, live or not, for tests and operators."""
        with Session(self.engine) as db:
            rows = db.exec(
                select(MessageRow)
                .where(MessageRow.session_id == session_id)
                .order_by(col(MessageRow.id))
            ).all()
            return [r.model_dump() for r in rows]
