"""The store's writer thread: one thread running units in the order they were submitted,
except that a turn's opening goes ahead of units still waiting.

Under load the queue holds closing commits, tool intents and openings. An opening is on
its request's path to the first token; nothing waits on a closing but its own turn's
end. In first-come order an opening waited behind every closing queued before it (p99
54 ms at 100 streams); ahead of them it waits for the unit in progress and the other
openings only.

Reordering is safe because nobody can have seen what a waiting unit will do: a turn's
end reaches its client only after its closing commits, so a request the client sends
after seeing it was submitted after that commit. Openings keep their order among
themselves, and so do all the other units.

Closings cannot starve: a turn counts against the concurrent-turn limit until its closing
has committed, so while closings wait no new turn is admitted, and at most that many
openings ever go ahead of one.

The event loop hands a unit over with `run_async` and gets an asyncio future the thread
settles with one `call_soon_threadsafe`: `run_in_executor` chained a concurrent future to
an asyncio one through two callbacks and a Python condition variable, about 3 % of a
turn's instructions over its two hops.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from queue import SimpleQueue
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Work = tuple[Future[Any] | asyncio.Future[Any], Callable[[], Any]]


class WriterThread(Executor):
    """A single-thread executor with two lanes; `submit` queues in the ordinary lane and
    `submit_first` in the lane that runs first. `shutdown(wait=True)` runs what is queued
    before the thread ends, as `ThreadPoolExecutor`'s does."""

    def __init__(self, name: str, initializer: Callable[[], None] | None = None) -> None:
        self._first: deque[_Work] = deque()
        self._queued: deque[_Work] = deque()
        self._wakeups: SimpleQueue[None] = SimpleQueue()
        """One per unit queued (and one at shutdown): the thread sleeps on it in C."""
        self._lock = threading.Lock()
        """Orders a queueing against the shutdown: nothing is queued after the last run."""
        self._closed = False
        self._initializer = initializer
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        # Daemon, so a store nobody closed never holds the interpreter open; drained at
        # exit, so a commit already submitted still lands.
        atexit.register(_drain_at_exit, weakref.ref(self))

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        future: Future[T] = Future()
        self._put(self._queued, (future, lambda: fn(*args, **kwargs)))
        return future

    def submit_first(self, fn: Callable[[], T]) -> Future[T]:
        """Queue `fn` ahead of every ordinary unit not yet started."""
        future: Future[T] = Future()
        self._put(self._first, (future, fn))
        return future

    def run_async(self, fn: Callable[[], T], *, first: bool = False) -> asyncio.Future[T]:
        """`fn` on the thread, for the running event loop: its result (or exception) in an
        asyncio future. Cancelled before it starts, `fn` never runs."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put(self._first if first else self._queued, (future, fn))
        return future

    def _put(self, lane: deque[_Work], work: _Work) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            lane.append(work)
            self._wakeups.put(None)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if cancel_futures:
                for future, _ in (*self._first, *self._queued):
                    if isinstance(future, asyncio.Future):
                        with contextlib.suppress(RuntimeError):  # its loop has closed
                            future.get_loop().call_soon_threadsafe(future.cancel)
                    else:
                        future.cancel()
                self._first.clear()
                self._queued.clear()
            self._wakeups.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _next(self) -> _Work | None:
        while True:
            self._wakeups.get()
            if self._first or self._queued:
                return (self._first or self._queued).popleft()
            if self._closed:
                return None

    def _run(self) -> None:
        if self._initializer is not None:
            self._initializer()
        while (item := self._next()) is not None:
            future, work = item
            if isinstance(future, asyncio.Future):
                _run_for_loop(future, work)
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = work()
            except BaseException as exc:  # the caller's to handle, as in ThreadPoolExecutor
                future.set_exception(exc)
            else:
                future.set_result(result)


def _run_for_loop(future: asyncio.Future[Any], work: Callable[[], Any]) -> None:
    if future.cancelled():  # read off its loop: a cancel racing this still finds it settled
        return
    loop = future.get_loop()
    try:
        result = work()
    except BaseException as exc:
        outcome: tuple[Any, BaseException | None] = (None, exc)
    else:
        outcome = (result, None)
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is left to tell
        loop.call_soon_threadsafe(_settle, future, *outcome)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _drain_at_exit(ref: weakref.ref[WriterThread]) -> None:
    writer = ref()
    if writer is not None:
        writer.shutdown(wait=True)
