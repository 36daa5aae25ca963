"""The terminal tool: one shell command per call, in the bubblewrap sandbox by default.

The `local` backend (a plain host subprocess) runs only when the profile names it; a
missing or broken sandbox is a tool error, never a silent fall back to the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
from typing import Any

from app.tools.registry import PathClaim, Tool, ToolContext, ToolError
from app.tools.safe_open import open_root
from app.tools.sandbox.policy import SandboxError
from app.tools.sandbox.process import (
    CommandResult,
    ResourceLimits,
    bwrap_available,
    run_local,
    run_sandboxed,
)
from app.tools.workspace import int_arg
from app.tools.workspace_quota import free_bytes, over_quota_note, usage_bytes

MAX_COMMAND_CHARS = 100_000
QUOTA_POLL_S = 0.5
"""How often the workspace size is sampled during a call; the overshoot past the quota is
at most what the command writes in this time (and each file is capped by RLIMIT_FSIZE)."""
LIMIT_MESSAGES = {
    "memory": "the command exceeded its memory limit and was stopped; use less memory "
    "(stream data instead of loading it whole) or ask the operator to raise tool_memory_bytes",
    "workspace_quota": "the workspace went over its byte quota while the command ran; "
    "delete files you no longer need",
    "disk_reserve": "the server's disk fell under its free-space reserve while the command "
    "ran; delete files or tell the operator",
}
_SIGNAL_LIMITS = {
    # The shell reports a signalled child as 128 + signal; the local backend as -signal.
    128 + 24: "killed: CPU time limit reached (tool_cpu_s)",
    -24: "killed: CPU time limit reached (tool_cpu_s)",
    128 + 25: "killed: file size limit reached (tool_file_size_bytes or the workspace quota)",
    -25: "killed: file size limit reached (tool_file_size_bytes or the workspace quota)",
}


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
    if result.limit_hit is not None:
        head = f"killed: {LIMIT_MESSAGES.get(result.limit_hit, result.limit_hit)}"
    elif result.exit_code in _SIGNAL_LIMITS:
        head = f"exit code: {result.exit_code} ({_SIGNAL_LIMITS[result.exit_code]})"
    elif result.timed_out:
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
            result = await guarded_run(ctx, command, timeout_s)
    except SandboxError as exc:
        raise ToolError(str(exc)) from exc
    text = render(result, timeout_s)
    note = await asyncio.to_thread(_quota_note, ctx)
    return f"{text}\n{note}" if note else text


def _quota_note(ctx: ToolContext) -> str | None:
    fd = open_root(ctx.workspace)
    try:
        return over_quota_note(ctx.quota, fd)
    finally:
        os.close(fd)


def _usage(ctx: ToolContext) -> tuple[int, int]:
    """(bytes the workspace holds, bytes free on its filesystem)."""
    fd = open_root(ctx.workspace)
    try:
        return usage_bytes(fd), free_bytes(fd)
    finally:
        os.close(fd)


async def guarded_run(ctx: ToolContext, command: str, timeout_s: float) -> CommandResult:
    """The sandboxed command under the per-call limits, stopped if the workspace outgrows
    its quota, or the disk's free space falls under the reserve, while it runs."""
    quota = ctx.quota
    used, free = await asyncio.to_thread(_usage, ctx)
    # Already over (an earlier call): the command may still run to delete files, but the
    # workspace must not grow any further.
    ceiling = max(quota.workspace_bytes, used)
    room = min(quota.workspace_bytes - used, free - quota.disk_reserve_bytes)
    limits = ResourceLimits(
        memory_bytes=quota.memory_bytes,
        cpu_seconds=quota.cpu_seconds,
        # No single file may be bigger than the room left (at least a page, so the
        # command can still write a small file and delete big ones).
        file_size_bytes=max(4096, min(quota.file_size_bytes, room)),
    )
    run = asyncio.create_task(
        run_sandboxed(
            command,
            ctx.workspace,
            timeout_s=timeout_s,
            network=ctx.network,
            limits=limits,
            egress_allow=ctx.fetch_allow_hosts,
        )
    )

    async def watch() -> str:
        while True:
            now_used, now_free = await asyncio.to_thread(_usage, ctx)
            if now_used > ceiling:
                return "workspace_quota"
            if now_free < quota.disk_reserve_bytes and now_used > used:
                return "disk_reserve"
            await asyncio.sleep(QUOTA_POLL_S)

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.wait({run, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not run.done():
            run.cancel()  # kills the command's processes (see sandbox.process._execute)
            # Awaited even when we are being cancelled: the kill must finish before we go.
            with contextlib.suppress(asyncio.CancelledError):
                await run
    if run.cancelled():
        reason = watcher.result() if watcher.done() and not watcher.cancelled() else "quota"
        return CommandResult(output="", exit_code=None, timed_out=False, limit_hit=reason)
    return run.result()


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
    spawns_process=True,
)


def terminal_tools() -> list[Tool]:
    return [TERMINAL]
