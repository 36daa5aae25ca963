"""Durable idempotency: an `Idempotency-Key` holds for 24 hours and across restarts.

The turn manager remembers keys in memory, which a restart forgets: a client retrying
after a deploy would run its turn, and its tools, twice. Here every keyed turn is recorded
when it starts and, when it ends, with its events; a replay the memory no longer knows is
answered from the record: the same completion id, text and usage, streamed or not. A
turn that never finished (its process died) or ended cancelled replays as that failure,
never as an empty success; the same key with another body is 409.
"""

from __future__ import annotations

import logging
import time

from app.agent.event_codec import decode, encode
from app.agent.turns import TurnHandle
from app.db.idempotency_store import IdempotencyStore
from app.protocol.errors import ApiError

log = logging.getLogger(__name__)


class DurableKeys:
    def __init__(self, store: IdempotencyStore) -> None:
        self.store = store

    def started(self, handle: TurnHandle, *, owner: str, key: str, digest: str) -> None:
        self.store.started(
            owner=owner,
            key=key,
            digest=digest,
            turn_id=handle.turn_id,
            session_id=handle.session_id,
        )

        def record(closed: TurnHandle) -> None:
            self.store.finished(
                owner=owner,
                key=key,
                completion_id=closed.completion_id,
                created=closed.created,
                events=[encode(e) for e in closed.history()],
            )

        handle.on_close.append(record)

    def replay(self, *, owner: str, key: str, digest: str) -> TurnHandle | None:
        """A finished handle rebuilt from the record, or None if the key is unknown."""
        record = self.store.find(owner=owner, key=key)
        if record is None:
            return None
        if record.digest != digest:
            raise ApiError(
                409,
                "this Idempotency-Key was used for a different request",
                param="Idempotency-Key",
                code="idempotency_key_reused",
            )
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
            raise ApiError(
                409,
                "the turn started with this Idempotency-Key did not finish (it was cancelled "
                "or the server stopped); send the request with a new key to run it again",
                param="Idempotency-Key",
                code="turn_cancelled",
                headers={"x-should-retry": "false"},
            )
        handle = TurnHandle(record.turn_id, record.session_id)
        handle.completion_id, handle.created = record.completion_id, record.created
        for event in events:
            handle.publish(event)
        handle.outcome = outcome
        handle.finished_at = time.monotonic()
        log.info("idempotent replay of turn %s from the database", record.turn_id)
        return handle
