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
from types import FrameType

import uvicorn
from fastapi import FastAPI
from sse_starlette.sse import AppStatus


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.courier_app = app
        # sse-starlette ends every open stream at the signal by default, which would cut
        # the very turns the drain exists to let finish; uvicorn's graceful timeout still
        # bounds them.
        AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # What the libraries and the app's startup made (~230,000 objects) lives as long as
        # the process, and every full collection walked it all: 100-250 ms with every
        # stream silent (whichever thread allocates, the collection holds the interpreter
        # lock), a few times per 10,000-message request. Frozen, collections skip it.
        gc.collect()
        gc.freeze()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        state = getattr(self.courier_app.state, "courier", None)
        if state is not None:
            state.turns.draining = True
        super().handle_exit(sig, frame)
