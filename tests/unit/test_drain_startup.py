"""What the server's startup does to the interpreter before it takes requests."""

from __future__ import annotations

import asyncio
import gc
import sys

import uvicorn
from fastapi import FastAPI

from app.ops.drain import GC_THRESHOLDS, SWITCH_INTERVAL_S, DrainingServer


async def test_startup_freezes_startup_objects_tunes_the_collector_and_the_switch() -> None:
    app = FastAPI()
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_config=None)
    server = DrainingServer(config, app)
    before, thresholds = sys.getswitchinterval(), gc.get_threshold()
    assert before != SWITCH_INTERVAL_S
    assert thresholds != GC_THRESHOLDS
    running = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                await asyncio.sleep(0.01)
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == GC_THRESHOLDS
    finally:
        server.should_exit = True
        await running
        sys.setswitchinterval(before)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
