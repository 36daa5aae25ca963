"""The terminal tool: one shell command per call, in the bubblewrap sandbox by default.

The `local` backend (a plain host subprocess) runs only when the profile names it; a
missing or broken sandbox is a tool error, never a silent fall back to the host.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from app.tools.registry import PathClaim, Tool, ToolContext, ToolError
from app.tools.sandbox import (
    CommandResult,
    SandboxError,
    bwrap_available,
    run_local,
    run_sandboxed,
)
from app.tools.workspace import int_arg

MAX_COMMAND_CHARS = 100_000


def _command(args: dict[str, Any]) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("terminal needs a non-empty `command` string")
    if "\x00" in command:
        raise ToolError("command contains a NUL byte")
    if len(command) > MAX_COMMAND_CHARS:
        raise ToolError(
            f"command is {len(command):,} chars (limit {MAX_COMMAND_CHARS:,}); "
            "write a script to a file with write_file and run that"
        )
    return command


def _timeout(args: dict[str, Any], ctx: ToolContext) -> float:
    cap = ctx.terminal_timeout_s
    if args.get("timeout") is None:  # models send an explicit null for "default"
        return cap
    return min(float(int_arg(args, "timeout", math.ceil(cap), 1)), cap)


def render(result: CommandResult, timeout_s: float) -> str:
    """Exit status first, so the model reads the outcome before the noise."""
    if result.timed_out:
        head = f"timed out after {timeout_s:g} s; the command and everything it started were killed"
    elif result.exit_code is not None and result.exit_code < 0:
        head = f"exit code: {result.exit_code} (killed by signal {-result.exit_code})"
    else:
        head = f"exit code: {result.exit_code}"
    return f"{head}\n{result.output or '(no output)'}"


async def terminal(args: dict[str, Any], ctx: ToolContext) -> str:
    command = _command(args)
    timeout_s = _timeout(args, ctx)
    try:
        if ctx.terminal_backend == "local":
            result = await run_local(command, ctx.workspace, timeout_s=timeout_s)
        else:
            # In a thread: a (re-)probe starts a process and must not stall the event loop.
            if not await asyncio.to_thread(bwrap_available):
                raise ToolError(
                    "the command sandbox (bubblewrap) is not working on this server, "
                    "so commands cannot run; the file tools still work"
                )
            result = await run_sandboxed(
                command, ctx.workspace, timeout_s=timeout_s, network=ctx.network
            )
    except SandboxError as exc:
        raise ToolError(str(exc)) from exc
    return render(result, timeout_s)


def terminal_scope(args: dict[str, Any], ctx: ToolContext) -> list[PathClaim] | None:
    # A shell command can touch any path in the workspace, so its scope is unknowable: None
    # makes the scheduler treat it as a barrier. An empty list would claim "touches
    # nothing" and let `rm -rf build` run beside a read of build/.
    return None


TERMINAL = Tool(
    name="terminal",
    description=(
        "Run a bash command and get its exit code and combined stdout/stderr. It runs in a "
        "sandbox: the workspace is the working directory (mounted at /workspace) and is "
        "the only place where writes persist; the rest of the filesystem is read-only, /tmp "
        "is empty on every call, and the network may be disabled. Each call is a fresh "
        "shell: no variables, cd or background processes carry over. Long outputs keep "
        "their start and end."
    ),
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line to run."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "description": "Seconds before the command is killed (the server caps it).",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    handler=terminal,
    read_only=False,
    path_scope=terminal_scope,
    available=bwrap_available,
    toolset="core",
)


def terminal_tools() -> list[Tool]:
    return [TERMINAL]
