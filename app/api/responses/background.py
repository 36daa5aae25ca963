"""Background responses (OpenAI's `background: true`): the turn runs on without its client,
and anyone holding the id polls it, cancels it, or reads its event stream from any
sequence number, also after a restart for what was stored.

Each running background response has a `Recording`: its stream events rendered once, as
the turn publishes them (a handle listener, not a subscriber: a subscriber counts as a
client and would keep an abandoned turn alive), numbered by the one `EventRenderer`, so a
live reader and a replay after a restart see the same numbers. The events are stored in
chunks (`app/db/background_store.py`): the first ones in the turn's opening unit, then
one commit per `COURIER_RESPONSE_EVENT_FLUSH_S` for every running recording together, and
the rest with the final record. A kill -9 loses at most the events since the last flush;
the restart marks the response `failed` and appends a `response.failed` event after the
last stored one, never `completed`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from app.agent.events import TurnEvent
from app.agent.turns.handle import TurnHandle
from app.api.http.errors import ApiError
from app.api.http.sse import KEEPALIVE, ServerSentEvent
from app.api.responses.render import (
    INTERRUPTED_MESSAGE,
    EventRenderer,
    ResponseShell,
)
from app.db import background_store as bg
from app.db import session_query as q
from app.db.session_models import ResponseRow
from app.db.store import Store
from app.webhooks.dispatcher import Webhooks

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0
"""How long a cancel waits for the turn's close before answering with the body so far."""


def encoded(frames: list[tuple[str, str]]) -> bytes:
    """(event type, JSON) pairs as SSE frames, named as the live Responses stream names them."""
    return b"".join(ServerSentEvent(event=name, data=data).encode() for name, data in frames)


class Recording:
    """One background response's stream events as rendered (index = sequence number)."""

    def __init__(self, shell: ResponseShell, handle: TurnHandle, *, owner: str) -> None:
        self.shell = shell
        self.handle = handle
        self.owner = owner
        """The key that created it: whose webhook announces its end."""
        self.renderer = EventRenderer(shell)
        self.events: list[tuple[str, str]] = self.renderer.start()
        """(event type, JSON) of every event so far."""
        self.flushed = 0
        """How many of `events` are stored (or on their way in a submitted unit)."""
        self.final: dict[str, Any] | None = None
        """The terminal body, once the final record is stored."""
        self._wake = asyncio.Event()
        self.recorded = asyncio.Event()

    def on_event(self, event: TurnEvent) -> None:
        if frames := self.renderer.add(event):
            self._add(frames)

    def _add(self, frames: list[tuple[str, str]]) -> None:
        self.events.extend(frames)
        # Every waiting reader wakes once; the next wait takes a fresh event.
        wake, self._wake = self._wake, asyncio.Event()
        wake.set()

    def take_pending(self) -> bg.Chunk | None:
        """The events not yet handed to the store, marked as handed."""
        start, end = self.flushed, len(self.events)
        if start == end:
            return None
        self.flushed = end
        return bg.Chunk(self.shell.id, start, [data for _, data in self.events[start:end]])

    def end(self, final: dict[str, Any]) -> bg.Chunk | None:
        """The closing events for `final`; returns what the final record must store."""
        self._add(self.renderer.finish(final))
        return self.take_pending()

    def stored(self, final: dict[str, Any]) -> None:
        self.final = final
        self.recorded.set()
        self._add([])

    def body_so_far(self) -> dict[str, Any]:
        """The polled body of a running response: `in_progress`, with the text so far."""
        if self.final is not None:
            return self.final
        return self.shell.body(status="in_progress", output=self.renderer.output.so_far())

    async def follow(self, after: int, keepalive_s: float) -> AsyncIterator[bytes]:
        """The events after sequence number `after` as SSE frames, then each new one as
        it comes, until the final record is stored; a keepalive when nothing came."""
        sent = after + 1
        while True:
            wake = self._wake
            if sent < len(self.events):
                batch, sent = self.events[sent:], len(self.events)
                yield encoded(batch)
                continue
            if self.final is not None:
                return
            try:
                await asyncio.wait_for(wake.wait(), keepalive_s)
            except TimeoutError:
                yield KEEPALIVE


class BackgroundRuns:
    """The process's running background responses, their flusher, cancel and replay."""

    def __init__(self, store: Store, *, flush_s: float, webhooks: Webhooks | None = None) -> None:
        self.store = store
        self.flush_s = flush_s
        self.webhooks = webhooks
        """Announces each response's end, enqueued in its final record's unit."""
        self.live: dict[str, Recording] = {}
        self._flusher: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._flusher = asyncio.create_task(self.keep_flushed(), name="background-flusher")
        if self.webhooks is not None:
            self.webhooks.start()

    async def aclose(self) -> None:
        """Stop the flusher (the final records carry the events it had not stored) and the
        webhook dispatcher (what it had not delivered goes after the restart)."""
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        if self.webhooks is not None:
            await self.webhooks.aclose()

    def open(self, row: ResponseRow, recording: Recording) -> None:
        """Inside the turn's opening unit: the row and the first events (`response.created`
        among them, which the SDK's stream helper insists on), so a restart before the
        first flush still replays a valid stream."""
        bg.insert_response(self.store, row)
        bg.append_chunks(self.store, [c for c in [recording.take_pending()] if c is not None])

    def attach(self, recording: Recording) -> None:
        """Follow the turn's events from now on, catching up on what it published since it
        was launched (synchronously: no event can slip between the two)."""
        handle = recording.handle
        for event in handle.history():
            recording.on_event(event)
        handle.listeners.append(recording.on_event)
        self.live[recording.shell.id] = recording

    async def finish(
        self, recording: Recording, final: dict[str, Any], *, last_message_id: int
    ) -> None:
        """The final record (body, status, the last events) in one unit, then the response
        leaves the live set: from here on the store answers for it."""
        tail = recording.end(final)
        rid = recording.shell.id

        def write() -> None:
            with self.store.unit():
                bg.finish_response(
                    self.store,
                    response_id=rid,
                    body=final,
                    last_message_id=last_message_id,
                    tail=tail,
                )
                if self.webhooks is not None:
                    self.webhooks.response_ended(
                        response_id=rid, owner=recording.owner, status=str(final["status"])
                    )

        try:
            await self.store.off_loop(write)
        finally:
            recording.stored(final)
            self.live.pop(rid, None)
        if self.webhooks is not None:
            self.webhooks.wake()

    async def flush(self) -> None:
        """Every running recording's new events in one commit (none when nothing is new)."""
        chunks = [c for r in list(self.live.values()) if (c := r.take_pending()) is not None]
        if not chunks:
            return

        def write() -> None:
            with self.store.unit():
                bg.append_chunks(self.store, chunks, status="in_progress")

        await self.store.off_loop(write)

    async def keep_flushed(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            try:
                await self.flush()
            except Exception:
                # The events stay in memory for live readers; only a restart's replay
                # misses them.
                log.exception("background responses: could not store stream events")

    def body(self, row: ResponseRow) -> dict[str, Any]:
        """What `GET /v1/responses/{id}` answers: live state while this process runs it."""
        recording = self.live.get(row.id)
        if recording is not None:
            return recording.body_so_far()
        stored: dict[str, Any] = json.loads(row.body)
        return stored

    def stream(self, row: ResponseRow, *, after: int, keepalive_s: float) -> AsyncIterator[bytes]:
        """`GET /v1/responses/{id}?stream=true&starting_after=N`: the events after N, live
        or stored. A position past the last event is refused: the client cannot have
        seen it, and waiting for it would hang."""
        recording = self.live.get(row.id)
        last = len(recording.events) - 1 if recording is not None else row.events_through
        if after > last:
            raise ApiError(
                400,
                f"starting_after {after} is past the last event of this response ({last})",
                param="starting_after",
                code="invalid_starting_after",
            )
        if recording is not None:
            return recording.follow(after, keepalive_s)
        return self._stored(row.id, after)

    async def _stored(self, response_id: str, after: int) -> AsyncIterator[bytes]:
        events = await asyncio.to_thread(
            bg.events_after, self.store, response_id=response_id, after=after
        )
        frames = [(json.loads(data)["type"], data) for data in events]
        if frames:
            yield encoded(frames)

    async def cancel(self, row: ResponseRow) -> dict[str, Any]:
        """Stop a running response (visible text kept, as `/stop`) and answer with its
        body once recorded; a finished one answers with its stored body, unchanged."""
        recording = self.live.get(row.id)
        if recording is None:
            fresh = q.get_response(self.store, response_id=row.id) or row
            stored: dict[str, Any] = json.loads(fresh.body)
            return stored
        recording.handle.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(recording.recorded.wait()), STOP_WAIT_S)
        except TimeoutError:
            log.warning("background response %s: cancel still closing", row.id)
        return recording.body_so_far()


def repair_unfinished(store: Store, webhooks: Webhooks | None = None) -> int:
    """At startup, before any turn runs: a background response a dead process left running
    is `failed`, its stored events kept and a `response.failed` event appended after the
    last one (and its webhook enqueued, in the same unit). Nothing is run again. Returns
    how many."""
    repaired = 0
    for row in bg.unfinished(store):
        body: dict[str, Any] = json.loads(row.body)
        body.update(
            status="failed",
            error={"code": "server_error", "message": INTERRUPTED_MESSAGE},
            completed_at=None,
        )
        seq = row.events_through + 1
        event = {"type": "response.failed", "sequence_number": seq, "response": body}
        tail = bg.Chunk(row.id, seq, [json.dumps(event, separators=(",", ":"))])
        with store.unit():
            bg.finish_response(
                store,
                response_id=row.id,
                body=body,
                last_message_id=q.max_message_id(store, session_id=row.session_id),
                tail=tail,
            )
            if webhooks is not None:
                webhooks.response_ended(response_id=row.id, owner=row.owner, status="failed")
        repaired += 1
    if repaired:
        log.warning("marked %d background response(s) of a previous process failed", repaired)
    return repaired
