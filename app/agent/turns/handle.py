"""A turn as its watchers hold it: its events, its task, its subscribers, its mailbox.

The manager (`manager.py`) creates and closes handles; routes subscribe to them and
replays read them, so a handle outlives its turn. Once the turn ends its events are sealed
(`SealedHistory`): each text or reasoning delta was an object of its own, and 10,000
finished turns of 100 KB answers held 1 GB (what is kept, and how much, is `finished.py`'s
business).
"""

from __future__ import annotations

import asyncio
import sys
from array import array
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from app.agent.events import TurnEvent, TurnFinished, TurnReasoning, TurnText
from app.agent.turn_context import Mailbox

REATTACH_GRACE_S = 3.0
"""How long a turn started with an idempotency key outlives its client: long enough for a
voice cockpit's retry to reattach instead of running the turn's side effects twice."""
SDK_RETRY_GRACE_S = 10.0
"""How long a non-streamed turn outlives a client whose SDK retries on its own (it sends
`x-stainless-retry-count`): the openai SDK waits at most 8 s (jittered down) before its
next attempt, which then finds this turn running and waits for its answer. Cancelling at
the hang-up instead ran the whole turn, and its tools, a second time."""

_TEXT, _REASONING, _OTHER = 0, 1, 2
_TAG_BITS = 2
_TAG_MASK = (1 << _TAG_BITS) - 1


class SealedHistory:
    """A finished turn's events in a fraction of the memory: each text or reasoning delta
    was an object of its own (40 for a short answer, thousands for a model that thinks
    aloud). Each kind's runs become one string, and the layout keeps every event's length
    and kind; every other event stays as it was. `events()` gives back equal ones."""

    __slots__ = ("_layout", "_others", "_reasoning", "_text", "nbytes")

    def __init__(
        self, text: str, reasoning: str, layout: array[int], others: tuple[TurnEvent, ...]
    ) -> None:
        self._text = text
        self._reasoning = reasoning
        self._layout = layout
        """Per event: (length or index in `_others`) << 2 | its kind (_TEXT, _REASONING,
        _OTHER)."""
        self._others = others
        self.nbytes = (
            sys.getsizeof(text)
            + sys.getsizeof(reasoning)
            + layout.itemsize * len(layout)
            # An estimate, not a census: what an event holds shows in its repr.
            + sum(sys.getsizeof(repr(event)) for event in others)
        )
        """About what the sealed events hold in memory, for `KeptTurns`' budget."""

    @classmethod
    def of(cls, events: list[TurnEvent]) -> SealedHistory:
        texts: list[str] = []
        thoughts: list[str] = []
        layout = array("q")
        others: list[TurnEvent] = []
        for event in events:
            if isinstance(event, TurnText):
                texts.append(event.text)
                layout.append(len(event.text) << _TAG_BITS | _TEXT)
            elif isinstance(event, TurnReasoning):
                thoughts.append(event.text)
                layout.append(len(event.text) << _TAG_BITS | _REASONING)
            else:
                layout.append(len(others) << _TAG_BITS | _OTHER)
                others.append(event)
        return cls("".join(texts), "".join(thoughts), layout, tuple(others))

    def events(self) -> tuple[TurnEvent, ...]:
        out: list[TurnEvent] = []
        at_text = at_thought = 0
        text, thoughts, others = self._text, self._reasoning, self._others
        for entry in self._layout:
            kind, n = entry & _TAG_MASK, entry >> _TAG_BITS
            if kind == _TEXT:
                out.append(TurnText(text[at_text : at_text + n]))
                at_text += n
            elif kind == _REASONING:
                out.append(TurnReasoning(thoughts[at_thought : at_thought + n]))
                at_thought += n
            else:
                out.append(others[n])
        return tuple(out)

    def __len__(self) -> int:
        return len(self._layout)


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a turn's opening put the request's messages."""

    created: bool
    """The opening made the session: nothing in it predates this request."""
    first_id: int | None
    """The first message row the request appended (None: it appended none)."""


class TurnHandle:
    def __init__(self, turn_id: str, session_id: str) -> None:
        self.turn_id = turn_id
        self.session_id = session_id
        self._history: list[TurnEvent] | SealedHistory = []
        """The events so far; once the turn has ended, sealed (see `SealedHistory`). One
        attribute, read once per access: the writer thread reads it while the loop seals."""
        self._queues: list[asyncio.Queue[TurnEvent]] = []
        self.listeners: list[Callable[[TurnEvent], None]] = []
        """Called with each event as it is published, in order. Unlike a subscriber, a
        listener is no client: it never keeps an abandoned turn running (a background
        response's recording)."""
        self.placed: Placed | None = None
        """Set by the opening (a relay has none): what a `store: false` response deletes is
        this request's rows, not a session continuity placed it on."""
        self.task: asyncio.Future[TurnFinished] | None = None
        """The turn's task while it runs; once it has ended, a plain future with its outcome
        (see `settled`)."""
        self.idempotency: tuple[str, str] | None = None
        """(owner, key) when the client sent an Idempotency-Key; set by the manager."""
        self.twin_key: tuple[str, str] | None = None
        """(owner, body digest) in the manager's twin map, once remembered there."""
        self.request_digest = ""
        self.completion_id = ""
        self.created = 0
        """The completion's identity, reused by every reattached response."""
        self.finished_at: float | None = None
        self.outcome: TurnFinished | None = None
        self.delivered = False
        """A client received the whole answer: an identical request later is a new ask."""
        self.on_disconnect: Literal["cancel", "continue"] = "cancel"
        """`continue`: the turn outlives its client, events buffered for a reattach."""
        self.on_close: list[Callable[[TurnHandle], None]] = []
        """Run once the turn's last event is published."""
        self.on_close_unit: list[Callable[[TurnHandle, TurnFinished | None], None]] = []
        """Run inside the turn's closing transaction with how it ended (durable idempotency
        records the turn there); for a turn without one (a relay), as it closes."""
        self.mailbox = Mailbox()
        """Steering messages for the running turn; the turn's context shares it."""
        self._grace: asyncio.TimerHandle | None = None
        """The pending cancel of an abandoned turn; a later hang-up restarts it."""

    def settled(self, task: asyncio.Future[TurnFinished]) -> None:
        """The task is done: a plain future with its outcome takes its place. A finished
        task keeps its coroutine and its context, about 2 KB and six objects the collector
        walks, for every finished turn kept for replays. (A task that raised keeps its own
        place: its exception is reported when it goes.)"""
        if self.task is not task or (not task.cancelled() and task.exception() is not None):
            return
        done: asyncio.Future[TurnFinished] = task.get_loop().create_future()
        if task.cancelled():
            done.cancel()
        else:
            done.set_result(task.result())
        self.task = done

    def steer(self, text: str) -> asyncio.Future[None]:
        """Queue a user message for the running turn; the future resolves once it is stored."""
        return self.mailbox.put(text)

    @property
    def cancelled(self) -> bool:
        return self.outcome is not None and self.outcome.exit_reason == "cancelled"

    def publish(self, event: TurnEvent) -> None:
        history = self._history
        if isinstance(history, SealedHistory):  # not expected after the end; never lost
            history = self._history = list(history.events())
        history.append(event)
        for queue in self._queues:
            queue.put_nowait(event)
        for listener in self.listeners:
            listener(event)

    def history(self) -> tuple[TurnEvent, ...]:
        history = self._history
        return tuple(history) if isinstance(history, list) else history.events()

    def event_count(self) -> int:
        """How many events the turn has published (an event's sequence number is its place)."""
        return len(self._history)

    def seal(self) -> int:
        """The turn has ended: keep its events compactly for replays (see `SealedHistory`).
        Returns about how many bytes they hold."""
        history = self._history
        if isinstance(history, list):
            history = self._history = SealedHistory.of(history)
        return history.nbytes

    def subscribe(self, after: int = 0) -> asyncio.Queue[TurnEvent]:
        """A queue of the turn's events after the first `after` (from its start by default),
        ending with `TurnFinished`. An event's sequence number is its 1-based position."""
        queue: asyncio.Queue[TurnEvent] = asyncio.Queue()
        for event in self.history()[after:]:
            queue.put_nowait(event)
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[TurnEvent]) -> None:
        if queue in self._queues:
            self._queues.remove(queue)

    async def events(self) -> AsyncIterator[TurnEvent]:
        queue = self.subscribe()
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, TurnFinished):
                    return
        finally:
            self.unsubscribe(queue)

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def abandon(self, grace_s: float = 0.0) -> None:
        """The client went away. Stop now if nobody can come back; wait `grace_s` (an SDK
        that retries by itself), or the reattach grace with an idempotency key, for a retry
        to reattach first. A turn a reattached retry still watches keeps running."""
        if self._queues or self.on_disconnect == "continue":
            return
        if self.idempotency is not None:
            grace_s = max(grace_s, REATTACH_GRACE_S)
        if grace_s <= 0:
            self.cancel()
            return
        if self._grace is not None:
            self._grace.cancel()  # the latest hang-up's grace counts, not the first's
        self._grace = asyncio.get_running_loop().call_later(grace_s, self._cancel_if_unwatched)

    def _cancel_if_unwatched(self) -> None:
        self._grace = None
        if not self._queues:
            self.cancel()

    async def wait(self) -> TurnFinished:
        assert self.task is not None
        return await asyncio.shield(self.task)
