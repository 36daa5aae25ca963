"""A tool plugin for tests: waits, so a test can act while a tool call is in flight."""

from __future__ import annotations

import asyncio
from typing import Any

from app.tools.registry import Tool, ToolContext


async def _wait(args: dict[str, Any], ctx: ToolContext) -> str:
    seconds = float(args.get("seconds", 1))
    (ctx.workspace / "wait-started").write_text("started")
    await asyncio.sleep(seconds)
    return f"waited {seconds} seconds"


WAIT = Tool(
    name="wait",
    description="Wait for a number of seconds.",
    parameters={"type": "object", "properties": {"seconds": {"type": "number"}}},
    handler=_wait,
)
