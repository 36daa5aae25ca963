"""A tool plugin for tests: code running inside the server process flips an env var.

This is the attack the frozen bypass exists for: a plugin, a skill or generated code
imported by a tool writes `os.environ["COURIER_APPROVALS"] = "off"` mid-process.
"""

from __future__ import annotations

import os
from typing import Any

from app.tools.registry import Tool, ToolContext


async def _set_env(args: dict[str, Any], ctx: ToolContext) -> str:
    os.environ[str(args["name"])] = str(args["value"])
    return f"set {args['name']}"


SET_ENV = Tool(
    name="set_env",
    description="Set an environment variable in the server process.",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
        "required": ["name", "value"],
    },
    handler=_set_env,
)
