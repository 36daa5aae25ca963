"""The store API: the only code that writes SQL. Every function takes keyword arguments.

Every write on a session's log goes through `_fenced`, which touches the session row with
a conditional UPDATE on the turn lease inside the same transaction as the write. The
UPDATE takes SQLite's write lock first, so a turn that lost its lease can never append
after a newer turn started: missing or foreign lease means deny.

A text turn commits twice, by two mechanisms:

* `unit()` makes the synchronous span that starts a turn (session or continuation, new
  messages, lease, turn row) one transaction;
* on the event loop, the writes that follow an upstream call and act on nothing (the
  usage row and roll-up, compressor counters, a final reply) are *deferred*: they ride in
  the next write's transaction, at the latest the one that closes the turn
  (`close_turn`), and reads of the session see them applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ctypes
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, func, select

from app.db import search_index, tool_sets
from app.db.engine import make_engine
from app.db.leased_rows import LeasedRows
from app.db.models import ApiCallRow, MessageRow, SessionRow, TurnRow
from app.db.turn_sql import (
    ACTIVE_ROWS,
    FENCE,
    FINISH_TURN,
    GET_SESSION,
    INSERT_API_CALL,
    INSERT_MESSAGE,
    INSERT_MESSAGE_ID,
    INSERT_SESSION,
    INSERT_TURN,
    RELEASE_LEASE,
    RELEASE_MOVING_HEAD,
    RENEW_LEASE,
    ROLLUP,
    ROLLUP_READ,
    SESSION_COLUMNS,
    SESSION_DEFAULTS,
    SESSION_FLAGS,
    TAKE_LEASE,
    TURN_DEFAULTS,
    session_row,
    session_update,
)
from app.db.writer import WriterThread
from app.observe.loop_passes import note as note_pass

log = logging.getLogger(__name__)

LIVE_LOGS_KEPT = 512
"""Sessions whose live log stays in memory between turns (least recently used go)."""


class LeaseLost(Exception):
    """The turn no longer holds the session's lease; its writes are refused."""


class PersistenceError(Exception):
    """A write failed; the caller ends the turn rather than act on unrecorded intent.

    The store's own name for a database failure: the agent catches this, never the
    driver's exceptions, so a second backend (PostgreSQL) changes nothing above `app/db/`.
    """


STORE_FAILURES: tuple[type[Exception], ...] = (PersistenceError, LeaseLost, SQLAlchemyError)
"""What a failed store call raises inside a unit, before the unit names it: code that runs
inside one (a tool's `in_unit` work) lets these through, so the unit rolls back whole."""


@contextmanager
def _as_persistence_error() -> Iterator[None]:
    try:
        yield
    except SQLAlchemyError as exc:
        raise PersistenceError(f"{type(exc).__name__}: {exc}") from exc


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


def _message_values(m: NewMessage, *, session_id: str, turn_id: str | None) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "turn_id": turn_id,
        "role": m.role,
        "content": m.content,
        "api_content": m.api_content,
        "tool_calls": json.dumps(list(m.tool_calls)) if m.tool_calls else None,
        "tool_call_id": m.tool_call_id,
        "tool_name": m.tool_name,
        "is_error": m.is_error,
        "reasoning": m.reasoning,
        "kind": m.kind,
        "images": json.dumps(list(m.images)) if m.images else None,
        "active": True,
        "compacted": False,
        "created_at": time.time(),
    }


def _stored_values(message_id: int, v: dict[str, Any]) -> StoredMessage:
    """The row `_message_values` inserted, as a read of it would return it."""
    return StoredMessage(
        id=message_id,
        role=v["role"],
        content=v["content"],
        api_content=v["api_content"],
        tool_calls=tuple(json.loads(v["tool_calls"])) if v["tool_calls"] else (),
        tool_call_id=v["tool_call_id"],
        tool_name=v["tool_name"],
        is_error=bool(v["is_error"]),
        turn_id=v["turn_id"],
        kind=v["kind"],
        images=tuple(json.loads(v["images"])) if v["images"] else (),
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


def _session_from(conn: Connection, found: Sequence[Any]) -> SessionRow:
    """A session row from a statement that selected (or returned) every column in order,
    its tool snapshot resolved (app/db/tool_sets.py)."""
    values = dict(zip(SESSION_COLUMNS, found, strict=True))
    for flag in SESSION_FLAGS:
        values[flag] = bool(values[flag])
    values["tool_snapshot"] = tool_sets.resolve(conn, values["tool_snapshot"])
    return session_row(values)


Deferred = Callable[[Connection], None]
"""A write that waits for the next transaction; it runs inside it, in order."""
Carried = list[tuple[str, Deferred]]
"""Deferred writes taken off the event loop's queue to commit in a writer-thread unit."""
T = TypeVar("T")


def _name_os_thread() -> None:
    """Name the writer thread for the OS too (`top -H`, /proc/PID/task/*/comm), so what it
    costs can be told from the event loop's share; Python names only its own view."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, b"courier-store", 0, 0, 0)  # PR_SET_NAME: 15 bytes at most
    except (OSError, AttributeError):
        pass  # not Linux: the name is a convenience


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        tool_sets.preload(engine)
        self._unit = threading.local()
        self._deferred: list[tuple[str, Deferred]] = []
        """(session id, write) pairs waiting for a transaction; event-loop thread only."""
        self._pending_rollups: dict[str, list[Callable[[SessionRow], None]]] = {}
        """What the deferred writes will do to each session row, for reads before then."""
        self._flush_scheduled = False
        self._live: OrderedDict[str, list[StoredMessage]] = OrderedDict()
        """Each recently used session's live log as the database holds it, extended on
        every committed append and dropped on anything that rewrites rows, so a turn does
        not reload (and re-decode) its whole history before every upstream call."""
        self._live_lock = threading.Lock()
        self._rows = LeasedRows(limit=LIVE_LOGS_KEPT)
        """The row of each session a turn of this process holds the lease of."""
        self._verify_live = os.environ.get("COURIER_VERIFY_LIVE_LOG") == "1"
        """Tests: compare the kept log with a fresh read on every call."""
        self._lost: set[tuple[str, str]] = set()
        """(session, lease) whose deferred reply was refused: reported by `close_turn`."""
        self.search_stale = True
        """Something committed since the search index last caught up (a hint: searches
        always catch up themselves; see `index_for_search`)."""
        self._writer = WriterThread("courier-store_0", initializer=self._start_writer)
        """The thread a turn's two transactions run on: a slow write (a 10,000-message
        request, a disk that stalls) then holds that one thread, not every stream."""

    @classmethod
    def open(cls, db_path: Path) -> Store:
        return cls(make_engine(db_path))

    def close(self) -> None:
        # A turn's closing commit still in flight lands first, then the writer's own
        # connection goes back, on its thread, before the pool is disposed.
        # RuntimeError: closed before, and the writer took its connection with it.
        with contextlib.suppress(RuntimeError):
            self._writer.submit(self._drop_writer_connection).result()
        self._writer.shutdown(wait=True)
        self.engine.dispose()

    def _start_writer(self) -> None:
        _name_os_thread()
        self._unit.writer = True

    def _unit_connection(self) -> tuple[Connection, bool]:
        """(connection, kept) for a new unit. The writer thread keeps one connection
        for all its units: a pool checkout, a `Connection` and its reset-on-return per unit
        cost about 0.3 ms of the writer thread's CPU per text turn (A/B, alternating
        blocks)."""
        if not getattr(self._unit, "writer", False):
            return self.engine.connect(), False
        conn: Connection | None = getattr(self._unit, "kept", None)
        if conn is None or conn.closed or conn.invalidated:
            conn = self._unit.kept = self.engine.connect()
        return conn, True

    def _drop_writer_connection(self) -> None:
        conn: Connection | None = getattr(self._unit, "kept", None)
        self._unit.kept = None
        if conn is not None:
            conn.close()

    async def off_loop(self, work: Callable[[], T], *, first: bool = False) -> T:
        """Run `work` (synchronous store calls, usually one `unit()`) on the store's writer
        thread. One thread: units never contend with each other for SQLite's write lock,
        and they commit in the order they were submitted, except that `first` (a turn's
        opening, on its request's way to the first token) goes ahead of the ordinary units
        still waiting (app/db/writer.py)."""
        return await self._writer.run_async(
            partial(contextvars.copy_context().run, work), first=first
        )

    def commit_off_loop(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """`work` (synchronous store writes) as one unit on the writer thread, with the
        writes deferred so far committed first and in order: left queued they would land
        after it (a counter update overwriting what a compaction reset), or in a commit
        of their own on the loop. Taken now, not when the future is first awaited."""
        carry = self.detach_deferred()

        def unit() -> T:
            with self.unit(carry=carry):
                return work()

        return self._writer.run_async(partial(contextvars.copy_context().run, unit))

    def detach_deferred(self) -> Carried:
        """Take the deferred writes off the event loop's queue, for a `unit(carry=...)` on
        the writer thread: left queued, the loop's next-tick flush would commit them on the
        loop, and after the closing unit released the lease they fence on."""
        writes, self._deferred = self._deferred, []
        self._pending_rollups.clear()
        return writes

    # ------------------------------------------------------------------ search index

    def index_for_search(self) -> int:
        """Index the messages committed since the last catch-up (app/db/search_index.py),
        in the current unit or one of its own; returns how many."""
        self._unit.indexing = True
        try:
            self.search_stale = False  # a commit from here on marks it again
            with self.unit():
                return search_index.index_pending(self._unit.conn)
        finally:
            self._unit.indexing = False

    def searchable(self) -> None:
        """Every committed message can be found: the pending ones are indexed first, on
        the writer thread (the caller waits for it, so never call this on the event loop:
        `await off_loop(index_for_search)` there)."""
        if getattr(self._unit, "writer", False) or getattr(self._unit, "conn", None) is not None:
            self.index_for_search()
            return
        if _on_event_loop():
            raise RuntimeError("searchable() waits on the writer thread: not on the event loop")
        self._writer.submit(self.index_for_search).result()

    async def keep_search_index(self, interval_s: float) -> None:
        """Index new messages about every `interval_s`, in one batch, while anything commits
        (runs until cancelled)."""
        while True:
            await asyncio.sleep(interval_s)
            if not self.search_stale:
                continue
            try:
                await self.off_loop(self.index_for_search)
            except STORE_FAILURES:
                log.warning("could not update the search index; retrying", exc_info=True)

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def unit(self, *, carry: Carried | None = None) -> Iterator[None]:
        """Make every store call inside the block (on this thread) one transaction.

        For synchronous spans only: the block must not await, or another coroutine's
        writes would join a transaction they know nothing about. Nested units join the
        outer one. An exception rolls the whole unit back. `carry`: deferred writes taken
        with `detach_deferred`, which run first.
        """
        if getattr(self._unit, "conn", None) is not None:
            yield
            return
        with _as_persistence_error():
            conn, kept = self._unit_connection()
            self._unit.conn = conn
            self._unit.fenced = set()
            try:
                conn.begin()
                self._run_deferred_in(conn, carry)
                yield
                conn.commit()
            except BaseException:
                self._unit.conn = self._unit.fenced = None
                try:
                    conn.rollback()
                finally:
                    # A kept connection that failed is not trusted with the next unit.
                    if kept:
                        self._drop_writer_connection()
                    else:
                        conn.close()
                self._rolled_back()
                raise
            self._unit.conn = self._unit.fenced = None
            if not kept:
                conn.close()
        self._committed()

    def _session(self, *, expire_on_commit: bool = True) -> Session:
        conn: Connection | None = getattr(self._unit, "conn", None)
        if conn is not None:
            # Joined to the unit's transaction: commit() here flushes, the unit commits.
            return Session(bind=conn, expire_on_commit=False)
        return Session(self.engine, expire_on_commit=expire_on_commit)

    def session(self) -> Session:
        """An ORM session for the other `app/db/` modules: joined to the current unit (so it
        sees and adds to its uncommitted work), else on its own connection."""
        return self._session()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a transaction for the other `app/db/` modules: the current
        unit's (committed with it), else a fresh one committed at the block's end. A
        separate connection inside a unit would wait on the unit's own write lock."""
        conn: Connection | None = getattr(self._unit, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.engine.begin() as fresh:
            yield fresh

    def reader(self) -> AbstractContextManager[Connection]:
        """A connection for reads in the other `app/db/` modules (the unit's, or pooled)."""
        return self._reader()

    @contextmanager
    def _reader(self) -> Iterator[Connection]:
        """A connection for Core reads: the unit's, or a pooled one (no ORM session)."""
        conn: Connection | None = getattr(self._unit, "conn", None)
        if conn is not None:
            yield conn
            return
        with self.engine.connect() as pooled:
            yield pooled

    @contextmanager
    def _tx(self, *, flush_deferred: bool = True) -> Iterator[Session]:
        in_unit = getattr(self._unit, "conn", None) is not None
        with _as_persistence_error(), self._session(expire_on_commit=False) as db:
            try:
                if flush_deferred and _on_event_loop():
                    self._run_deferred(db.connection())
                yield db
                db.commit()
            except Exception:
                # Inside a unit the unit decides: a refused fenced write (LeaseLost) wrote
                # nothing and must not undo the unit's other work; anything else that
                # escapes the unit rolls it back there.
                if not in_unit:
                    db.rollback()
                    self._rolled_back()
                raise
        if not in_unit:
            self._committed()

    def _after_commit(self, action: Callable[[], None]) -> None:
        """Run `action` once the current transaction (or unit) has committed."""
        pending: list[Callable[[], None]] | None = getattr(self._unit, "after", None)
        if pending is None:
            pending = self._unit.after = []
        pending.append(action)

    def _committed(self) -> None:
        if not getattr(self._unit, "indexing", False):
            self.search_stale = True
        actions: list[Callable[[], None]] = getattr(self._unit, "after", None) or []
        self._unit.after = []
        for action in actions:
            action()

    def _rolled_back(self) -> None:
        # Rare, and the kept logs may hold rows that never landed: start them over.
        self._unit.after = []
        with self._live_lock:
            self._live.clear()
        self._rows.clear()

    def _keep_live(self, session_id: str, added: list[StoredMessage]) -> None:
        with self._live_lock:
            rows = self._live.get(session_id)
            if rows is not None:
                rows.extend(added)

    def _start_live(self, session_id: str) -> None:
        with self._live_lock:
            self._live[session_id] = []
            while len(self._live) > LIVE_LOGS_KEPT:
                self._live.popitem(last=False)

    def forget_live(self, session_id: str) -> None:
        """Drop the kept live log and row: for other `app/db/` modules that change the
        session's rows."""
        self._forget_live(session_id)
        self._forget_row(session_id)

    def _forget_row(self, session_id: str) -> None:
        self._rows.forget(session_id)
        if getattr(self._unit, "conn", None) is not None:
            # Again at commit, as for the live log: a row read meanwhile would outlive it.
            self._after_commit(lambda: self._rows.forget(session_id))

    def session_written(self, session_id: str, **values: Any) -> None:
        """Another `app/db/` module set these columns of the session row: the lease
        holder's kept row follows."""
        self._rows.set(session_id, **values)

    def _forget_live(self, session_id: str) -> None:
        with self._live_lock:
            self._live.pop(session_id, None)
        if getattr(self._unit, "conn", None) is not None:
            # Again at commit: a log kept meanwhile (a new session's, a read of the rows before
            # this unit's change) would outlive the change.
            self._after_commit(lambda: self._forget_live(session_id))

    def _defer(self, session_id: str, write: Deferred) -> bool:
        """Queue `write` for the next transaction if that is safe here; False = run now.

        Only on the event loop and outside a unit: worker threads never share the queue.
        A flush is scheduled for the next loop iteration, so nothing waits across an await
        for longer than one tick even if no later write comes.
        """
        if not _on_event_loop() or getattr(self._unit, "conn", None) is not None:
            return False
        self._deferred.append((session_id, write))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_soon)
        return True

    def _issue(self, session_id: str, write: Deferred, apply: Callable[[SessionRow], None]) -> None:
        """Run or defer a write to the session row whose effect on the row `apply` makes:
        the lease holder's kept row takes it now, and reads before a deferred write commits
        see it too. `apply` only ever sees detached rows (the kept one, or one `get_session`
        built), so it writes their values directly: through the ORM's instrumented
        attributes each write cost about 1.8 µs, a roll-up's 15."""
        if self._defer(session_id, write):
            self._pending_rollups.setdefault(session_id, []).append(apply)
        else:
            with self._write() as conn:
                write(conn)
        self._rows.apply(session_id, apply)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        try:
            self.flush()
        except Exception:
            log.exception("deferred store writes failed")

    def flush(self) -> None:
        """Commit deferred writes now (before acting on them, or before a foreign read)."""
        if self._deferred:
            with self._tx():
                pass

    def _run_deferred(self, conn: Connection) -> None:
        writes, self._deferred = self._deferred, []
        self._pending_rollups.clear()
        for _sid, write in writes:
            write(conn)

    def _run_deferred_in(self, conn: Connection, carry: Carried | None = None) -> None:
        for _sid, write in carry or ():
            write(conn)
        if self._deferred and _on_event_loop():
            self._run_deferred(conn)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A connection in a transaction for the hot writes: the unit's (it commits), else
        a fresh one committed here, with the loop's deferred writes first. No ORM session:
        these writes are DBAPI statements (app/db/raw.py)."""
        conn: Connection | None = getattr(self._unit, "conn", None)
        if conn is not None:
            yield conn
            return
        with _as_persistence_error(), self.engine.connect() as fresh:
            try:
                fresh.begin()
                if _on_event_loop():
                    self._run_deferred(fresh)
                yield fresh
                fresh.commit()
            except Exception:
                fresh.rollback()
                self._rolled_back()
                raise
        self._committed()

    def _fenced(self, db: Session | Connection, *, session_id: str, lease: str) -> None:
        # Inside a unit the first fence holds for the rest of it: the transaction owns the
        # write lock, so nobody can take the lease in between (one statement, not one a write).
        if self._holds_fence(session_id, lease):
            return
        conn = db if isinstance(db, Connection) else db.connection()
        now = time.time()
        result = FENCE.run(conn, {"now": now, "sid": session_id, "lease": lease})
        self._fence_proved(session_id, lease, result.rowcount, now=now)

    def _holds_fence(self, session_id: str, lease: str) -> bool:
        fenced: set[tuple[str, str]] | None = getattr(self._unit, "fenced", None)
        return fenced is not None and (session_id, lease) in fenced

    def _fence_proved(
        self, session_id: str, lease: str, rowcount: int, *, now: float | None = None
    ) -> None:
        """A statement conditioned on the lease touched `rowcount` session rows; `now`: the
        `updated_at` it wrote."""
        if rowcount != 1:
            self._rows.forget(session_id)
            raise LeaseLost(f"turn lease for session {session_id} is not held")
        if now is not None:
            self._rows.set(session_id, updated_at=now)
        fenced: set[tuple[str, str]] | None = getattr(self._unit, "fenced", None)
        if fenced is not None:
            fenced.add((session_id, lease))

    def _unfence(self, session_id: str, lease: str) -> None:
        """The unit released this lease: later writes in it must check again."""
        fenced: set[tuple[str, str]] | None = getattr(self._unit, "fenced", None)
        if fenced is not None:
            fenced.discard((session_id, lease))

    # ------------------------------------------------------------------ sessions

    def create_session(
        self,
        *,
        session_id: str,
        owner: str,
        profile: str,
        system_prompt: str,
        end_user: str = "",
        tool_snapshot: str = "[]",
        client_tools: str = "[]",
        client_instructions: Sequence[str] = (),
        lease: str | None = None,
        lease_ttl_s: float = 0.0,
        messages: Sequence[NewMessage] = (),
        transcript: tuple[str, int] | None = None,
    ) -> SessionRow:
        """Create a session, optionally already leased and holding its first messages, in
        one transaction: a crash can never leave a half-made session behind. `transcript`:
        (head, length) of its transcript index, when the caller adds the keys itself."""
        now = time.time()
        values = {
            **SESSION_DEFAULTS,
            "id": session_id,
            "owner": owner,
            "end_user": end_user,
            "profile": profile,
            "system_prompt": system_prompt,
            "tool_snapshot": tool_snapshot,
            "client_tools": client_tools,
            "client_instructions": json.dumps(list(client_instructions)),
            "lease": lease,
            "lease_expires_at": now + lease_ttl_s if lease else None,
            "started_at": now,
            "updated_at": now,
        }
        if transcript is not None:
            values["transcript_head"], values["transcript_len"] = transcript
        self._forget_live(session_id)
        row = session_row(values)
        with self._write() as conn:
            INSERT_SESSION.run(
                conn, values | {"tool_snapshot": self._tool_set(conn, tool_snapshot)}
            )
            if lease:
                # Created leased in this unit: the unit's later writes need no fence, which
                # would only rewrite the `updated_at` just inserted (a statement per turn).
                self._fence_proved(session_id, lease, 1)
                self._rows.keep(row)
            if messages:
                rows = [_message_values(m, session_id=session_id, turn_id=None) for m in messages]
                INSERT_MESSAGE.run_many(conn, rows)
            else:
                # Known to be empty: the appends that follow extend it as they commit, so
                # the session's first upstream call does not read back what it just wrote.
                self._after_commit(lambda: self._start_live(session_id))
        return row

    def set_tool_snapshot(self, *, session_id: str, lease: str, snapshot: str, reason: str) -> None:
        """Replace the tool snapshot and mark the next request as a deliberate cache break."""
        with self._tx() as db:
            self._fenced(db, session_id=session_id, lease=lease)
            conn = db.connection()
            conn.execute(
                text(
                    "UPDATE session SET tool_snapshot = :snap, pending_cache_break = :reason "
                    "WHERE id = :sid"
                ),
                {"snap": self._tool_set(conn, snapshot), "reason": reason, "sid": session_id},
            )
        self._rows.set(session_id, tool_snapshot=snapshot, pending_cache_break=reason)

    def _tool_set(self, conn: Connection, snapshot: str) -> str:
        """What a session row stores for `snapshot`, its set stored with the transaction."""
        stored, added = tool_sets.store_reference(conn, snapshot)
        if added:
            self._after_commit(partial(tool_sets.committed, self.engine, stored))
        return stored

    def get_session(self, *, session_id: str) -> SessionRow | None:
        with self._reader() as conn:
            found = GET_SESSION.run(conn, {"sid": session_id}).fetchone()
            if found is None:
                return None
            row = _session_from(conn, found)
        return self._with_deferred(row)

    def leased_row(self, *, session_id: str) -> SessionRow | None:
        """The session's row as `get_session` would read it now, for the turn holding its
        lease: from memory while the store keeps it (app/db/leased_rows.py), else read.
        The test suite compares a kept row with a fresh read on every call."""
        kept = self._rows.get(session_id)
        if kept is None:
            return self.get_session(session_id=session_id)
        if self._verify_live:
            self._verify_row(kept)
        return kept

    def _verify_row(self, kept: SessionRow) -> None:
        fresh = self.get_session(session_id=kept.id)
        stored = fresh.model_dump() if fresh is not None else {}
        if fresh is not None and fresh.lease != kept.lease:
            return  # the lease was taken away: the turn's next fenced write finds out
        mine = kept.model_dump()
        if differ := sorted(k for k in mine if stored.get(k) != mine[k]):
            detail = {k: (mine[k], stored.get(k)) for k in differ}
            raise AssertionError(f"session {kept.id}: the kept row differs: {detail}")

    def _with_deferred(self, row: SessionRow) -> SessionRow:
        # Deferred writes not yet committed: the caller sees the row they will make.
        for apply in self._pending_rollups.get(row.id, ()):
            apply(row)
        return row

    def acquire_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        """Take the session's turn lease if it is free or expired. Inside a unit, taking it
        proves the fence for the unit's later writes (the transaction holds the write lock
        from this statement on, so nobody can take it in between)."""
        now = time.time()
        with self._write() as conn:
            params = {"lease": lease, "exp": now + ttl_s, "sid": session_id, "now": now}
            found = TAKE_LEASE.run(conn, params).fetchone()
            if found is None:
                return False
            self._fence_proved(session_id, lease, 1)
            self._rows.keep(_session_from(conn, found))
            return True

    def renew_lease(self, *, session_id: str, lease: str, ttl_s: float) -> bool:
        exp = time.time() + ttl_s
        with self._write() as conn:
            params = {"exp": exp, "sid": session_id, "lease": lease}
            if RENEW_LEASE.run(conn, params).rowcount != 1:
                return False
        self._rows.set(session_id, lease_expires_at=exp)
        return True

    def release_lease(self, *, session_id: str, lease: str) -> None:
        self._unfence(session_id, lease)
        self._rows.forget(session_id)
        with self._write() as conn:
            RELEASE_LEASE.run(conn, {"sid": session_id, "lease": lease})

    def clear_dead_leases(self, alive: Callable[[str], bool]) -> int:
        """At startup: free the leases whose holder process is gone (`alive(lease)` False)."""
        with self._tx() as db:
            held = db.execute(text("SELECT id, lease FROM session WHERE lease IS NOT NULL"))
            dead = [(sid, lease) for sid, lease in held if not alive(lease)]
            for sid, lease in dead:
                db.execute(
                    text(
                        "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                        "WHERE id = :sid AND lease = :lease"
                    ),
                    {"sid": sid, "lease": lease},
                )
        self._rows.clear()
        return len(dead)

    def clear_all_leases(self) -> int:
        """At startup: a lease left by a killed process would block its session until expiry."""
        with self._tx() as db:
            result = db.connection().execute(
                text(
                    "UPDATE session SET lease = NULL, lease_expires_at = NULL "
                    "WHERE lease IS NOT NULL"
                )
            )
        self._rows.clear()
        return int(getattr(result, "rowcount", 0))

    # ------------------------------------------------------------------ messages

    def append_messages(
        self,
        *,
        session_id: str,
        lease: str,
        turn_id: str | None,
        messages: Sequence[NewMessage],
        defer: bool = False,
    ) -> list[int]:
        """Append rows, fenced on the lease; returns their ids.

        `defer=True` (a final reply, which nothing acts on) lets the rows ride in the next
        transaction, normally the one that closes the turn; it returns no ids, and a lease
        lost by then is reported by `close_turn`.
        """
        values = [_message_values(m, session_id=session_id, turn_id=turn_id) for m in messages]

        def write(conn: Connection) -> list[int]:
            self._fenced(conn, session_id=session_id, lease=lease)
            # One row at a time: executemany hands back no RETURNING rows.
            ids = [int(INSERT_MESSAGE_ID.run(conn, v).fetchone()[0]) for v in values]
            added = [_stored_values(i, v) for i, v in zip(ids, values, strict=True)]
            if added:
                self._after_commit(lambda: self._keep_live(session_id, added))
            return ids

        def deferred(conn: Connection) -> None:
            write(conn)

        if defer and self._defer(session_id, self._fence_checked(session_id, lease, deferred)):
            return []
        with self._write() as conn:
            return write(conn)

    def _fence_checked(self, session_id: str, lease: str, write: Deferred) -> Deferred:
        """A deferred fenced write: a lost lease drops it and is remembered for the turn,
        instead of rolling back the unfenced writes that share its transaction."""

        def checked(conn: Connection) -> None:
            try:
                write(conn)
            except LeaseLost:
                self._lost.add((session_id, lease))

        return checked

    def set_api_content(
        self, *, session_id: str, lease: str, message_id: int, api_content: str
    ) -> None:
        """Give a row a model-facing text different from its display text."""
        self._forget_live(session_id)
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
        self._forget_live(session_id)
        self._forget_row(session_id)
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
        changed = values if cache_break is None else values | {"pending_cache_break": cache_break}
        self._rows.set(session_id, **changed)

    def update_session(self, *, session_id: str, lease: str, **values: Any) -> None:
        """Persist compressor counters, fenced like every other write: a turn that lost
        its lease must not reset the breaker of the turn that now owns the session.

        Deferred on the event loop: they ride in the turn's next transaction."""

        def apply(session: SessionRow) -> None:
            vars(session).update(values)  # a detached row (see `_issue`)

        columns = tuple(sorted(values))
        params = {f"v_{k}": v for k, v in values.items()} | {"sid": session_id}

        def write(conn: Connection) -> None:
            if self._holds_fence(session_id, lease):
                session_update(columns).run(conn, params)
                return
            # The update is the fence too: one statement where a fence and a write were two.
            fencing = session_update(columns, fenced=True)
            now = time.time()
            result = fencing.run(conn, params | {"now": now, "lease": lease})
            self._fence_proved(session_id, lease, result.rowcount, now=now)

        self._issue(session_id, write, apply)

    def get_message(self, *, session_id: str, message_id: int) -> StoredMessage | None:
        """One row of a session, live or archived (not retracted)."""
        self.flush()
        with self._session() as db:
            row = db.get(MessageRow, message_id)
            if row is None or row.session_id != session_id:
                return None
            if not row.active and not row.compacted:
                return None
            return _stored(row)

    def active_messages(self, *, session_id: str) -> list[StoredMessage]:
        self.flush()
        with self._live_lock:
            kept = self._live.get(session_id)
            if kept is not None:
                self._live.move_to_end(session_id)
                kept = list(kept)
        if kept is not None:
            if self._verify_live and (fresh := self._load_active(session_id)) != kept:
                raise AssertionError(f"kept live log of {session_id} drifted: {kept} != {fresh}")
            return kept
        rows = self._load_active(session_id)
        note_pass("load", len(rows))
        if getattr(self._unit, "conn", None) is None:
            with self._live_lock:
                self._live[session_id] = list(rows)
                while len(self._live) > LIVE_LOGS_KEPT:
                    self._live.popitem(last=False)
        return rows

    def keeps_live(self, session_id: str) -> bool:
        """The session's live log is in memory: `active_messages` will not read it."""
        with self._live_lock:
            return session_id in self._live

    def load_live(self, *, session_id: str) -> None:
        """Read the live log into memory, for a worker thread (app/agent/context/row_passes.py).

        `active_messages` without its flush: the deferred queue is the loop's, so the
        caller flushes there first. Only the lease holder appends to a session, and it is
        waiting for this, so no commit of the session lands between the read and the keep.
        """
        rows = self._load_active(session_id)
        note_pass("load", len(rows))
        with self._live_lock:
            self._live[session_id] = rows
            while len(self._live) > LIVE_LOGS_KEPT:
                self._live.popitem(last=False)

    def _load_active(self, session_id: str) -> list[StoredMessage]:
        with self._reader() as conn:
            rows = ACTIVE_ROWS.run(conn, {"sid": session_id}).fetchall()
        return [
            StoredMessage(
                id=r[0],
                role=r[1],
                content=r[2],
                api_content=r[3],
                tool_calls=tuple(json.loads(r[4])) if r[4] else (),
                tool_call_id=r[5],
                tool_name=r[6],
                is_error=bool(r[7]),
                turn_id=r[8],
                kind=r[9],
                images=tuple(json.loads(r[10])) if r[10] else (),
            )
            for r in rows
        ]

    def search_messages(
        self, *, session_id: str, query: str, limit: int = 20
    ) -> list[StoredMessage]:
        """Full-text search over live and compacted (not retracted) messages of a session."""
        self.flush()
        self.searchable()
        with self._session() as db:
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
        with self._write() as conn:
            self._fenced(conn, session_id=session_id, lease=lease)
            INSERT_TURN.run(
                conn,
                {
                    **TURN_DEFAULTS,
                    "id": turn_id,
                    "session_id": session_id,
                    "started_at": time.time(),
                },
            )

    def finish_turn(
        self, *, turn_id: str, exit_reason: str, iterations: int, error: str | None = None
    ) -> None:
        # Not fenced: recording why a turn ended must succeed even after its lease is gone.
        with self._write() as conn:
            self._finish(conn, turn_id, exit_reason, iterations, error)

    @staticmethod
    def _finish(
        conn: Connection, turn_id: str, exit_reason: str, iterations: int, error: str | None
    ) -> None:
        FINISH_TURN.run(
            conn,
            {
                "now": time.time(),
                "reason": exit_reason,
                "iterations": iterations,
                "error": error,
                "tid": turn_id,
            },
        )

    def close_turn(
        self,
        *,
        session_id: str,
        lease: str,
        turn_id: str,
        exit_reason: str,
        iterations: int,
        error: str | None = None,
        transcript: tuple[str, int] | None = None,
    ) -> None:
        """The turn's closing transaction: whatever it deferred (reply, usage, counters),
        its finish record and the lease's release, in one commit. `transcript`: the
        (head, length) the session's transcript index moves to, in the release's statement.

        Ask `take_lost` first (in the same unit) whether a deferred reply was refused
        because the lease had gone, so the turn reports that instead of success.
        """
        self._unfence(session_id, lease)
        self._rows.forget(session_id)
        with self._write() as conn:
            self._finish(conn, turn_id, exit_reason, iterations, error)
            params = {"sid": session_id, "lease": lease}
            if transcript is None:
                RELEASE_LEASE.run(conn, params)
            else:
                head, length = transcript
                RELEASE_MOVING_HEAD.run(conn, params | {"h": head, "n": length})

    def take_lost(self, *, session_id: str, lease: str) -> bool:
        """Whether a deferred fenced write of this lease was refused (its lease had gone);
        flushes what is deferred first, and forgets the answer once given."""
        self.flush()
        if (session_id, lease) in self._lost:
            self._lost.discard((session_id, lease))
            return True
        return False

    def get_turn(self, *, turn_id: str) -> TurnRow | None:
        self.flush()
        with self._session(expire_on_commit=False) as db:
            return db.get(TurnRow, turn_id)

    # ------------------------------------------------------------------ usage ledger

    def record_api_call(
        self,
        *,
        session_id: str,
        owner: str,
        turn_id: str,
        call: ApiCallRecord,
        end_user: str = "",
    ) -> None:
        """One row per upstream call, and the session's roll-up, in one transaction."""
        row = {
            "session_id": session_id,
            "turn_id": turn_id,
            "owner": owner,
            "end_user": end_user,
            "profile": call.profile,
            "upstream_model": call.upstream_model,
            "input_tokens": call.input_tokens,
            "output_tokens": call.output_tokens,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            "reasoning_tokens": call.reasoning_tokens,
            "cost_usd": str(call.cost_usd) if call.cost_usd is not None else None,
            "cost_status": call.cost_status,
            "cost_source": call.cost_source,
            "latency_ms": call.latency_ms,
            "ttft_ms": call.ttft_ms,
            "outcome": call.outcome,
            "cache_break": call.cache_break,
            "created_at": time.time(),
        }

        unknown = call.cost_usd is None and call.cost_status == "unknown"

        def roll_up(session: SessionRow) -> None:
            values = vars(session)  # a detached row (see `_issue`)
            if call.cache_break is not None and values["pending_cache_break"] == call.cache_break:
                values["pending_cache_break"] = None
            values["input_tokens"] += call.input_tokens
            values["output_tokens"] += call.output_tokens
            values["cache_read_tokens"] += call.cache_read_tokens
            values["cache_write_tokens"] += call.cache_write_tokens
            values["reasoning_tokens"] += call.reasoning_tokens
            values["upstream_calls"] += 1
            values["cost_unknown_calls"] += int(unknown)
            if call.cost_usd is not None:
                values["cost_usd"] = str(Decimal(values["cost_usd"]) + call.cost_usd)

        rolled = {
            "input": call.input_tokens,
            "output": call.output_tokens,
            "cache_read": call.cache_read_tokens,
            "cache_write": call.cache_write_tokens,
            "reasoning": call.reasoning_tokens,
            "unknown": int(unknown),
            "brk": call.cache_break,
            "sid": session_id,
        }

        def rolled_up(conn: Connection, old: str) -> bool:
            # Decimal in Python: SQLite would add the stored text as a lossy float.
            cost = old if call.cost_usd is None else str(Decimal(old) + call.cost_usd)
            return bool(ROLLUP.run(conn, rolled | {"cost": cost, "old": old}).rowcount == 1)

        # The cost the session will hold when this write runs: the lease holder's kept row
        # has every earlier write of the turn applied, so no read is needed.
        expected = self._rows.cost(session_id)

        def write(conn: Connection) -> None:
            INSERT_API_CALL.run(conn, row)
            if expected is not None and rolled_up(conn, expected):
                return
            found = ROLLUP_READ.run(conn, {"sid": session_id}).fetchone()
            if found is not None:
                rolled_up(conn, found[0])

        # Deferred on the event loop: the call's record rides in the turn's next commit
        # (the reply's, or the closing one), and reads of the session see it meanwhile.
        self._issue(session_id, write, roll_up)

    def api_calls(
        self, *, session_id: str, limit: int = 100, offset: int = 0
    ) -> tuple[list[ApiCallRow], int]:
        self.flush()
        with self._session(expire_on_commit=False) as db:
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

    def spent_by_owner(
        self, *, owner: str, since: float | None = None, end_user: str | None = None
    ) -> tuple[Decimal, int]:
        """Known spend and the number of unpriced calls for one API key (or one end user of
        it), optionally windowed."""
        self.flush()
        with self._session() as db:
            query = select(ApiCallRow.cost_usd).where(ApiCallRow.owner == owner)
            if end_user is not None:
                query = query.where(ApiCallRow.end_user == end_user)
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
        self.flush()
        with self._session() as db:
            rows = db.exec(
                select(MessageRow)
                .where(MessageRow.session_id == session_id)
                .order_by(col(MessageRow.id))
            ).all()
            return [r.model_dump() for r in rows]
