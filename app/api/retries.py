"""Retries find the turn they repeat: an `Idempotency-Key`, or the implicit signals every
client sends (a byte-identical body, the SDK's retry counter).

Durable idempotency: an `Idempotency-Key` holds for 24 hours and across restarts. The turn
manager remembers keys in memory, which a restart forgets: a client retrying
after a deploy would run its turn, and its tools, twice. Here every keyed turn is recorded
when it starts and, when it ends, with its events; a replay the memory no longer knows is
answered from the record: the same completion id, text and usage, streamed or not. A
turn that never finished (its process died) or ended cancelled replays as that failure,
never as an empty success; the same key with another body is 409.

Keys and twins live in a principal's replay scope (`Principal.replay_scope`): its key's,
or for a token bound to one session, that session's alone. The `owner` the records and
maps are keyed by below is that scope.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from weakref import WeakValueDictionary

from fastapi import Request

from app.agent.events import TurnFinished
from app.agent.refusals import IdempotencyKeyReused, TurnCancelled
from app.agent.turns.event_codec import decode, encode
from app.agent.turns.handle import SDK_RETRY_GRACE_S, TurnHandle
from app.agent.turns.manager import TurnManager
from app.api.http.errors import ApiError
from app.db.idempotency_store import IdempotencyStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Retry:
    """How this request relates to an earlier one: an explicit key, or the implicit
    signals every client sends (a byte-identical body, the SDK's retry counter)."""

    digest: str
    key: str | None = None
    marked: bool = False
    """The SDK's retry counter says this repeats an attempt (`x-stainless-retry-count` >= 1)."""
    first_try: bool = False
    """The counter says this is an attempt's first try (0): it repeats nothing. Two pipecat
    calls under one key open with the same `[system]` body; without this, the second
    would attach to the first caller's turn."""
    sdk_retries: bool = False
    """The client's SDK retries by itself (it sends the counter at all, 0 included)."""

    @property
    def hangup_grace_s(self) -> float:
        """How long a non-streamed turn outlives its client's hang-up: long enough for the
        SDK's own retry to find it (`TurnHandle.abandon`), else not at all. Streams get
        none: an SDK never retries a stream it has started reading, and a voice client
        that hangs up mid-answer means stop."""
        return SDK_RETRY_GRACE_S if self.sdk_retries else 0.0


def retry_of(request: Request, body: bytes) -> Retry:
    """The request's retry signals: an explicit Idempotency-Key, the SDK's retry counter,
    and the digest of `body` (the endpoint's own bytes, so a chat body and a Responses body
    never look alike) that makes a byte-identical repeat recognisable without either."""
    key = request.headers.get("idempotency-key")
    if key is not None and not 1 <= len(key) <= 255:
        raise ApiError(400, "Idempotency-Key must be 1-255 characters", param="Idempotency-Key")
    count = request.headers.get("x-stainless-retry-count")
    tries = int(count) if count is not None and count.isdigit() else None
    return Retry(
        digest=hashlib.sha256(body).hexdigest(),
        key=key,
        marked=tries is not None and tries >= 1,
        first_try=tries == 0,
        sdk_retries=count is not None,
    )


class DurableKeys:
    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store

    def started(
        self, handle: TurnHandle, *, owner: str, key: str, digest: str, session_id: str
    ) -> None:
        """Record the keyed turn, in the store's current unit (the turn's opening one), and
        its end in the closing one: no commit of its own, none on the event loop."""
        self.store.started(
            owner=owner, key=key, digest=digest, turn_id=handle.turn_id, session_id=session_id
        )

        def record(closed: TurnHandle, finished: TurnFinished | None) -> None:
            # Inside the closing unit the final event is not published yet: it is the last.
            events = [*closed.history(), *((finished,) if finished is not None else ())]
            self.store.finished(
                owner=owner,
                key=key,
                completion_id=closed.completion_id,
                created=closed.created,
                events=[encode(e) for e in events],
            )

        handle.on_close_unit.append(record)

    def replay(self, *, owner: str, key: str, digest: str) -> TurnHandle | None:
        """A finished handle rebuilt from the record, or None if the key is unknown."""
        record = self.store.find(owner=owner, key=key)
        if record is None:
            return None
        if record.digest != digest:
            raise IdempotencyKeyReused()
        events = [decode(e) for e in record.events or []]
        outcome = events[-1] if events else None
        if (
            outcome is None
            or outcome.kind != "finished"
            or outcome.exit_reason
            in (
                "cancelled",
                "interrupted",
            )
        ):
            raise TurnCancelled(
                "the turn started with this Idempotency-Key did not finish (it was cancelled "
                "or the server stopped); send the request with a new key to run it again"
            )
        handle = TurnHandle(record.turn_id, record.session_id)
        handle.completion_id, handle.created = record.completion_id, record.created
        for event in events:
            handle.publish(event)
        handle.outcome = outcome
        handle.finished_at = time.monotonic()
        log.info("idempotent replay of turn %s from the database", record.turn_id)
        return handle


class Twins:
    """The in-memory twins of the turn manager, backed by the durable keys."""

    def __init__(self, turns: TurnManager, durable: DurableKeys | None) -> None:
        self.turns = turns
        self.durable = durable
        self._locks: WeakValueDictionary[str, asyncio.Lock] = WeakValueDictionary()
        self._first_tries: dict[str, set[asyncio.Future[None]]] = {}
        """First tries still opening, per twin key: a retry of one waits for them."""

    @asynccontextmanager
    async def opening(self, owner: str, retry: Retry) -> AsyncIterator[None]:
        """Hold while a request finds its twin or opens its turn. A retry arriving while
        its twin is still opening must find it: requests that could be twins (same key, or
        same body) open one at a time; others never wait. A first try is nobody's twin, so
        first tries of one body open side by side (a hundred voice calls greeting alike);
        a retry still waits for them."""
        twin = f"{owner}:" + (
            f"key:{retry.key}" if retry.key is not None else f"body:{retry.digest}"
        )
        if retry.first_try and retry.key is None:
            opened = asyncio.get_running_loop().create_future()
            self._first_tries.setdefault(twin, set()).add(opened)
            try:
                yield
            finally:
                opened.set_result(None)
                pending = self._first_tries[twin]
                pending.discard(opened)
                if not pending:
                    del self._first_tries[twin]
            return
        async with self._locks.setdefault(twin, asyncio.Lock()):
            if opening := self._first_tries.get(twin):
                await asyncio.wait(set(opening))
            yield

    def find(self, owner: str, retry: Retry) -> TurnHandle | None:
        """The turn this request repeats, if any: running (attach) or finished (replay)."""
        if retry.key is not None and (seen := self.turns.find(owner, retry.key)):
            if seen.request_digest != retry.digest:
                raise IdempotencyKeyReused()
            if seen.cancelled:
                raise TurnCancelled()  # never replay a cancelled turn as an empty success
            return seen
        if retry.key is not None and self.durable is not None:
            replayed = self.durable.replay(owner=owner, key=retry.key, digest=retry.digest)
            if replayed is not None:
                self.turns.remember(replayed, owner, retry.key, retry.digest)
                return replayed
        if retry.first_try:
            return None
        return self.turns.find_twin(owner, retry.digest, marked_retry=retry.marked)

    def record_start(
        self, handle: TurnHandle, owner: str, retry: Retry, *, session_id: str
    ) -> None:
        """The durable record of a keyed turn; call it inside the unit that opens the turn."""
        if retry.key is not None and self.durable is not None:
            self.durable.started(
                handle, owner=owner, key=retry.key, digest=retry.digest, session_id=session_id
            )

    def remember(self, handle: TurnHandle, owner: str, retry: Retry) -> None:
        """The in-memory twins (the durable record is `record_start`'s)."""
        if retry.key is not None:
            self.turns.remember(handle, owner, retry.key, retry.digest)
        self.turns.remember_twin(handle, owner, retry.digest)
