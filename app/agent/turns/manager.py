"""TurnManager: turns are tasks owned by the server, not by the HTTP request.

The route subscribes to a turn's events; the turn holds the session's lease for its whole
life, so two requests can never interleave appends on one session.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial

from app.agent.events import TurnError, TurnFinished
from app.agent.loop import run_turn
from app.agent.refusals import SessionBusy as SessionBusy
from app.agent.turn_context import TurnContext
from app.agent.turns.finished import MAX_KEPT_BYTES, KeptTurns
from app.agent.turns.handle import TurnHandle
from app.agent.turns.log import log_turn
from app.db.instance import new_lease_token as new_lease_token
from app.db.store import Carried, Store
from app.observe.logs import bind_turn
from app.observe.metrics import Metrics
from app.providers.pricing import Cost
from app.providers.usage import Usage

log = logging.getLogger(__name__)

LEASE_TTL_S = 6 * 3600.0
"""Long enough for any turn; a crashed process's leases are cleared at the next start."""


LEASE_LOST = TurnError(
    message="another turn took over this session", type="conflict", code="session_busy"
)
"""The reply could not be stored because the lease had gone (as `loop.py` reports it)."""


IDEMPOTENCY_TTL_S = 600.0
MAX_REMEMBERED = 10_000
TWIN_WINDOW_S = 5.0
"""A byte-identical request this soon after its twin finished is a retry, not a new ask."""
RETRY_WINDOW_S = 120.0
"""How long a request the SDK marks as a retry (`x-stainless-retry-count` >= 1) may still
reattach to the finished turn it repeats."""
RUNNING_PASSED = 8
"""Running turns the twin map's sweep steps past per new turn: enough to reach the finished
ones behind them over a few turns, never a walk over every turn in flight on each."""

OnFinish = Callable[[TurnHandle, TurnFinished], tuple[str, int] | None]
"""After-turn bookkeeping in the closing unit; returns the (head, length) the session's
transcript moves to, which the lease's release writes in the same statement."""
CLOSE_RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Waits between attempts to record a turn's end once its closing commit failed."""
NOT_STORED = TurnError(
    message="the turn could not be saved; nothing further was run",
    type="server_error",
    code="persistence_failed",
)


class TurnManager:
    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        *,
        max_running: int = 1024,
        max_kept_bytes: int = MAX_KEPT_BYTES,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.max_running = max_running
        self._by_key: OrderedDict[tuple[str, str], TurnHandle] = OrderedDict()
        self._by_digest: OrderedDict[tuple[str, str], TurnHandle] = OrderedDict()
        self.running: dict[str, TurnHandle] = {}
        self.draining = False
        self._retries: set[asyncio.Task[None]] = set()
        """Background retries of closes the database refused (see `_close_later`)."""
        self.latest: OrderedDict[str, TurnHandle] = OrderedDict()
        """Each session's newest turn, running or finished, for stop and event replay."""
        self.kept = KeptTurns(self._forget, max_kept_bytes)
        """The byte budget over the finished turns the maps above remember."""

    def latest_for(self, session_id: str) -> TurnHandle | None:
        return self.latest.get(session_id)

    def _track(self, handle: TurnHandle) -> None:
        self.running[handle.turn_id] = handle
        self.latest[handle.session_id] = handle
        self.latest.move_to_end(handle.session_id)
        while len(self.latest) > MAX_REMEMBERED:
            self.latest.popitem(last=False)

    def find_twin(self, owner: str, digest: str, *, marked_retry: bool) -> TurnHandle | None:
        """The turn an identical request of this principal started, if this one repeats it:
        still running, or finished moments ago (longer when the SDK says it is retrying).
        A cancelled turn is never a twin: replaying it would answer an empty success; nor is
        one that failed in a way a retry can fix."""
        handle = self._by_digest.get((owner, digest))
        if handle is None or handle.cancelled:
            return None
        outcome = handle.outcome
        if outcome is not None and outcome.error is not None and outcome.error.retryable:
            return None  # the retry was told to try again (a rate limit): let it
        if handle.finished_at is None:
            return handle
        if handle.delivered and not marked_retry:
            return None  # answered in full: the same words again are a new question
        window = RETRY_WINDOW_S if marked_retry else TWIN_WINDOW_S
        return handle if time.monotonic() - handle.finished_at < window else None

    def _forget(self, handle: TurnHandle) -> None:
        """Out of every map, as if newer turns had pushed it out (`KeptTurns`' budget)."""
        if self.latest.get(handle.session_id) is handle:
            del self.latest[handle.session_id]
        if handle.idempotency is not None and self._by_key.get(handle.idempotency) is handle:
            del self._by_key[handle.idempotency]
        if handle.twin_key is not None and self._by_digest.get(handle.twin_key) is handle:
            del self._by_digest[handle.twin_key]

    def remember_twin(self, handle: TurnHandle, owner: str, digest: str) -> None:
        handle.twin_key = (owner, digest)
        self._by_digest[(owner, digest)] = handle
        self._by_digest.move_to_end((owner, digest))
        # A turn finished longer ago than any retry window is nobody's twin: held until
        # 10,000 newer ones pushed it out, a busy server kept every answer of the last few
        # minutes (and the collector walked them all).
        horizon = time.monotonic() - RETRY_WINDOW_S
        passed = 0
        while self._by_digest:
            oldest_key, oldest = next(iter(self._by_digest.items()))
            ended = oldest.finished_at
            if len(self._by_digest) > MAX_REMEMBERED or (ended is not None and ended < horizon):
                self._by_digest.popitem(last=False)
            elif ended is None and passed < RUNNING_PASSED:
                self._by_digest.move_to_end(oldest_key)  # still running: look past it
                passed += 1
            else:
                break

    def find(self, owner: str, key: str) -> TurnHandle | None:
        """A running or recently finished turn started with this idempotency key."""
        now = time.monotonic()
        while self._by_key:
            oldest = next(iter(self._by_key.values()))
            if oldest.finished_at is None or now - oldest.finished_at < IDEMPOTENCY_TTL_S:
                break
            self._by_key.popitem(last=False)
        return self._by_key.get((owner, key))

    def remember(self, handle: TurnHandle, owner: str, key: str, digest: str) -> None:
        handle.idempotency = (owner, key)
        handle.request_digest = digest
        self._by_key[(owner, key)] = handle
        while len(self._by_key) > MAX_REMEMBERED:
            self._by_key.popitem(last=False)

    def at_capacity(self) -> bool:
        """As many turns run as the upstream pool was sized for; one more would queue."""
        return len(self.running) >= self.max_running

    def new_lease(self, session_id: str) -> str:
        lease = new_lease_token()
        if not self.store.acquire_lease(session_id=session_id, lease=lease, ttl_s=LEASE_TTL_S):
            raise SessionBusy(session_id)
        return lease

    @staticmethod
    def new_handle() -> TurnHandle:
        """A turn's identity and event sink, before its context exists."""
        return TurnHandle("turn_" + secrets.token_hex(8), "")

    def launch(
        self,
        handle: TurnHandle,
        ctx: TurnContext,
        *,
        on_finish: OnFinish | None = None,
        cancelled: bool = False,
    ) -> TurnHandle:
        """Run a turn whose context (already holding the lease, its turn row recorded) was
        built whole for `handle`. `cancelled`: nobody waits for it any more, so it only
        records its end (a task cancelled before its first step would skip its close)."""
        handle.session_id = ctx.session_id
        handle.mailbox = ctx.mailbox
        handle.task = task = asyncio.create_task(
            self._run(ctx, handle, on_finish, cancelled=cancelled), name=handle.turn_id
        )
        task.add_done_callback(handle.settled)
        self._track(handle)
        return handle

    def start_task(
        self,
        session_id: str,
        run: Callable[[TurnHandle], Awaitable[TurnFinished]],
        *,
        profile: str,
    ) -> TurnHandle:
        """A turn with no log of its own (a relay): events, cancellation and metrics only."""
        handle = self.new_handle()
        handle.session_id = session_id
        turn_id = handle.turn_id

        async def body() -> TurnFinished:
            self.metrics.in_flight.inc()
            finished: TurnFinished | None = None
            try:
                finished = await run(handle)
                return finished
            finally:
                self.metrics.in_flight.dec()
                self.running.pop(turn_id, None)
                reason = finished.exit_reason if finished else "cancelled"
                self.metrics.turns.labels(profile, reason).inc()
                self._close(handle, finished)

        handle.task = task = asyncio.create_task(body(), name=turn_id)
        task.add_done_callback(handle.settled)
        self._track(handle)
        return handle

    def _close(self, handle: TurnHandle, finished: TurnFinished | None) -> None:
        handle.finished_at = time.monotonic()
        handle.outcome = finished
        _run_unit_hooks(handle, finished)  # none left after a closing unit ran them
        if finished is not None:
            handle.publish(finished)
        for hook in handle.on_close:
            try:
                hook(handle)
            except Exception:
                log.exception("turn %s: a close hook failed", handle.turn_id)
        self.kept.add(handle, handle.seal())

    async def _run(
        self,
        ctx: TurnContext,
        handle: TurnHandle,
        on_finish: OnFinish | None,
        *,
        cancelled: bool = False,
    ) -> TurnFinished:
        finished: TurnFinished | None = None
        bind_turn(session=ctx.session_id, turn=handle.turn_id)
        started = time.monotonic()
        self.metrics.in_flight.inc()
        try:
            if cancelled:
                raise asyncio.CancelledError
            finished = await run_turn(ctx)
            return finished
        finally:
            self.metrics.in_flight.dec()
            if self.draining and finished is not None and finished.exit_reason == "cancelled":
                finished = replace(finished, exit_reason="interrupted")  # nobody asked it to stop
            reason = finished.exit_reason if finished else "cancelled"
            self.metrics.turns.labels(ctx.profile.name, reason).inc()
            carry = self.store.detach_deferred()
            closing = partial(self._record_end, ctx, handle, finished, on_finish, carry)
            try:
                finished = await self.store.off_loop(closing)
            except Exception:
                log.exception("turn %s: could not close the turn record", handle.turn_id)
                finished = self._close_later(ctx, handle, finished)
            except asyncio.CancelledError:
                # Cancelled again while closing (shutdown): the writer thread still
                # commits the close; the client-facing end below must still happen.
                log.warning("turn %s: cancelled while its close was committing", handle.turn_id)
            # Still `running` while closing: a shutdown waits for the close to land.
            self.running.pop(handle.turn_id, None)
            log_turn(
                turn_id=handle.turn_id,
                session_id=ctx.session_id,
                profile=ctx.profile.name,
                finished=finished,
                started=started,
            )
            self._close(handle, finished)

    def _close_later(
        self, ctx: TurnContext, handle: TurnHandle, finished: TurnFinished | None
    ) -> TurnFinished:
        """The closing commit failed (the database refused writes): the reply it carried is
        lost, so the client hears `persistence_failed`; the finish record and the lease's
        release are retried in the background, or the session would stay busy until a
        restart."""
        if finished is None or finished.error is None:
            failed = finished or TurnFinished("cancelled", "stop", Usage(), Cost.zero(), 0)
            finished = replace(failed, exit_reason="persistence_failed", error=NOT_STORED)
        outcome = finished
        # The records the closing unit would have written went down with it: a keyed
        # turn stays "started", so its replay says it did not finish, never success.
        handle.on_close_unit.clear()

        def close() -> None:
            self.store.close_turn(
                session_id=ctx.session_id,
                lease=ctx.lease,
                turn_id=handle.turn_id,
                exit_reason=outcome.exit_reason,
                iterations=outcome.iterations,
                error=outcome.error.code if outcome.error else None,
            )

        async def retry() -> None:
            for delay in CLOSE_RETRY_S:
                await asyncio.sleep(delay)
                try:
                    await self.store.off_loop(close)
                    return
                except Exception:
                    log.warning("turn %s: closing still fails; retrying", handle.turn_id)
            log.error("turn %s: gave up closing; the lease clears at restart", handle.turn_id)

        task = asyncio.create_task(retry(), name=f"close-{handle.turn_id}")
        self._retries.add(task)
        task.add_done_callback(self._retries.discard)
        return finished

    def _record_end(
        self,
        ctx: TurnContext,
        handle: TurnHandle,
        finished: TurnFinished | None,
        on_finish: OnFinish | None,
        carry: Carried,
    ) -> TurnFinished | None:
        """The turn's closing commit, on the store's writer thread: what the turn deferred
        (its reply, usage), the after-turn bookkeeping (the transcript index), finish,
        release. Returns the outcome, `lease_lost` if the reply could not be stored."""
        with self.store.unit(carry=carry):
            lost = self.store.take_lost(session_id=ctx.session_id, lease=ctx.lease)
            if lost and finished is not None and finished.error is None:
                finished = replace(finished, exit_reason="lease_lost", error=LEASE_LOST)
            transcript = None
            if on_finish is not None and finished is not None:
                try:
                    transcript = on_finish(handle, finished)
                except Exception:
                    log.exception("turn %s: after-turn bookkeeping failed", handle.turn_id)
            self.store.close_turn(
                session_id=ctx.session_id,
                lease=ctx.lease,
                turn_id=handle.turn_id,
                exit_reason=finished.exit_reason if finished else "cancelled",
                iterations=finished.iterations if finished else 0,
                error=finished.error.code if finished and finished.error else None,
                transcript=transcript,
            )
            _run_unit_hooks(handle, finished)
        return finished

    async def shutdown(self, drain_s: float = 0.0) -> None:
        """Let running turns finish for up to `drain_s`, then cancel the rest; a turn cut
        off here ends `interrupted`, not `cancelled`: nobody asked it to stop."""
        self.draining = True
        tasks = [h.task for h in self.running.values() if h.task is not None]
        if tasks and drain_s > 0:
            await asyncio.wait(tasks, timeout=drain_s)
        handles = list(self.running.values())
        for handle in handles:
            handle.cancel()
        for handle in handles:
            if handle.task is not None:
                await asyncio.gather(handle.task, return_exceptions=True)


def _run_unit_hooks(handle: TurnHandle, finished: TurnFinished | None) -> None:
    """Each hook runs once: taken off the handle before it runs."""
    hooks, handle.on_close_unit = handle.on_close_unit, []
    for hook in hooks:
        try:
            hook(handle, finished)
        except Exception:
            log.exception("turn %s: a closing record failed", handle.turn_id)
