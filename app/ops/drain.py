"""Graceful shutdown: on SIGTERM the server stops taking turns and lets running ones end.

Uvicorn already stops accepting connections and waits (up to the drain timeout) for open
requests; what it cannot know is that a request arriving on a kept-alive connection during
that wait would start a turn the drain then cuts off. Marking the turn manager as draining
at the signal makes such requests a 503 with Retry-After, and makes a turn cut off when the
timeout runs out end `interrupted` (the server went away), not `cancelled` (someone asked).
"""

from __future__ import annotations

import gc
import socket
import sys
from types import FrameType

import uvicorn
from fastapi import FastAPI

SWITCH_INTERVAL_S = 0.0005
"""How long a thread may keep the interpreter lock while another waits (CPython: 5 ms).

The store's writer thread gives the lock up around every SQLite call and must win it
back from the event loop each time; behind a busy loop each of those waits could last
the whole interval, so under 100 streams a 1.5 ms unit took 12-23 ms at p99 and every
opening queued behind it. At 0.5 ms: 9-13 ms, and the loaded TTFT p99 was lower by about
a third in each of four paired runs (units timed inside the server)."""
GC_THRESHOLDS = (7000, 10, 10)
"""The collector's thresholds (CPython: 700, 10, 10). Under 100 streams the young objects
at each collection are mostly the in-flight turns' own, walked again at every pass: with
700, 120 young and 11 middle passes per 10 seconds, 263-365 ms of collection (about 0.45 ms
of CPU per request) and 4-8 passes over 10 ms. With 7,000, in seven runs paired with those
(benchmarks/hot_path.py `--only ttft`, the server's own pause histogram): 11 and 1, 101-149
ms, 3-6 over 10 ms; the added TTFT p99's median over the seven went from 54 to 25 ms (the
host is noisy: both spanned 9-61 ms). Larger thresholds made each young pass longer than
the tail allows (17 ms at 20,000, 24-32 ms at 50,000)."""


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.courier_app = app

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # What the libraries and the app's startup made (~230,000 objects) lives as long as
        # the process, and every full collection walked it all: 100-250 ms with every
        # stream silent (whichever thread allocates, the collection holds the interpreter
        # lock), a few times per 10,000-message request. Frozen, collections skip it.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = getattr(self.courier_app.state, "courier", None)
        if state is not None:
            state.turns.draining = True
        super().handle_exit(sig, frame)
