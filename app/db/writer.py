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
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Work = tuple[Future[Any], Callable[[], Any]]


class WriterThread(Executor):
    """A single-thread executor with two lanes; `submit` queues in the ordinary lane and
    `submit_first` in the lane that runs first. `shutdown(wait=True)` runs what is queued
    before the thread ends, as `ThreadPoolExecutor`'s does."""

    def __init__(self, name: str, initializer: Callable[[], None] | None = None) -> None:
        self._first: deque[_Work] = deque()
        self._queued: deque[_Work] = deque()
        self._ready = threading.Condition()
        self._closed = False
        self._initializer = initializer
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        # Daemon, so a store nobody closed never holds the interpreter open; drained at
        # exit, so a commit already submitted still lands.
        atexit.register(_drain_at_exit, weakref.ref(self))

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return self._put(self._queued, lambda: fn(*args, **kwargs))

    def submit_first(self, fn: Callable[[], T]) -> Future[T]:
        """Queue `fn` ahead of every ordinary unit not yet started."""
        return self._put(self._first, fn)

    def _put(self, lane: deque[_Work], work: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            lane.append((future, work))
            self._ready.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._ready:
            self._closed = True
            if cancel_futures:
                for future, _ in (*self._first, *self._queued):
                    future.cancel()
                self._first.clear()
                self._queued.clear()
            self._ready.notify()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join()

    def _next(self) -> _Work | None:
        with self._ready:
            while not self._first and not self._queued:
                if self._closed:
                    return None
                self._ready.wait()
            return (self._first or self._queued).popleft()

    def _run(self) -> None:
        if self._initializer is not None:
            self._initializer()
        while (item := self._next()) is not None:
            future, work = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = work()
            except BaseException as exc:  # the caller's to handle, as in ThreadPoolExecutor
                future.set_exception(exc)
            else:
                future.set_result(result)


def _drain_at_exit(ref: weakref.ref[WriterThread]) -> None:
    writer = ref()
    if writer is not None:
        writer.shutdown(wait=True)
