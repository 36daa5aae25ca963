"""A JSON answer waits for its turn's end or its client's hang-up, whichever comes first.

A stream learns of a hang-up from its own response (`app/api/http/sse.py`); a JSON request
has no response running yet, so it watches the connection itself. Without this, an SDK
that timed out and retried would find its first attempt still running tools beside the
retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request


async def client_gone(request: Request) -> None:
    """Returns when the client hangs up (the body is already read, so the next ASGI
    message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def outlasted(request: Request, work: asyncio.Future[Any]) -> bool:
    """Wait for `work` or the client's hang-up; True if `work` is done (it is left running
    otherwise: what to stop is the caller's business)."""
    hangup = asyncio.ensure_future(client_gone(request))
    try:
        await asyncio.wait({work, hangup}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        hangup.cancel()
    return work.done()
