"""The store's core: its writer thread, its transactions and the lease fence under every
write on a session's log. The sections of `Store` (sessions, messages, turns, the usage
ledger, the search index) build on this class, each in its module.

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
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from typing import Any, Self, TypeVar

from sqlalchemy import Connection, Engine
from sqlmodel import Session

from app.db import tool_sets
from app.db.database import Target, open_engine
from app.db.leased_rows import LeasedRows
from app.db.migrations import runner as migrations
from app.db.models import SessionRow
from app.db.store.errors import LeaseLost, as_persistence_error
from app.db.store.records import StoredMessage
from app.db.turn_sql import FENCE
from app.db.writer import WriterThread

log = logging.getLogger(__name__)

LIVE_LOGS_KEPT = 512
"""Sessions whose live log stays in memory between turns (least recently used go)."""


Deferred = Callable[[Connection], None]
"""A write that waits for the next transaction; it runs inside it, in order."""
Carried = list[tuple[str, Deferred]]
"""Deferred writes taken off the event loop's queue to commit in a writer-thread unit."""
T = TypeVar("T")


def name_os_thread() -> None:
    """Name the writer thread for the OS too (`top -H`, /proc/PID/task/*/comm), so what it
    costs can be told from the event loop's share; Python names only its own view."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, b"courier-store", 0, 0, 0)  # PR_SET_NAME: 15 bytes at most
    except (OSError, AttributeError):
        pass  # not Linux: the name is a convenience


def on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class Transactions:
    """The writer thread, units and deferred writes, the kept live logs and rows, the fence."""

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
    def open(cls, target: Target, *, migrate: bool = True) -> Self:
        """The store on a SQLite file or a PostgreSQL URL, its schema brought to the newest
        revision first (or, with `migrate=False`, refused unless it is there already)."""
        engine = open_engine(target)
        try:
            if migrate:
                migrations.upgrade(engine)
            else:
                migrations.check(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    def close(self) -> None:
        # A turn's closing commit still in flight lands first, then the writer's own
        # connection goes back, on its thread, before the pool is disposed.
        # RuntimeError: closed before, and the writer took its connection with it.
        with contextlib.suppress(RuntimeError):
            self._writer.submit(self._drop_writer_connection).result()
        self._writer.shutdown(wait=True)
        self.engine.dispose()

    def _start_writer(self) -> None:
        name_os_thread()
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
        with as_persistence_error():
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
        with as_persistence_error(), self._session(expire_on_commit=False) as db:
            try:
                if flush_deferred and on_event_loop():
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
        if not on_event_loop() or getattr(self._unit, "conn", None) is not None:
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
        if self._deferred and on_event_loop():
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
        with as_persistence_error(), self.engine.connect() as fresh:
            try:
                fresh.begin()
                if on_event_loop():
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
