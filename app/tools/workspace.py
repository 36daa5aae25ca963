"""Workspace tools: list and read files inside the session's workspace, nowhere else."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.tools.registry import Tool, ToolContext, ToolError

MAX_LIST_ENTRIES = 500
MAX_READ_CHARS = 100_000
DEFAULT_READ_LINES = 2000


def resolve_in_workspace(workspace: Path, raw: object) -> Path:
    """Resolve `raw` inside `workspace`, following symlinks, and refuse anything outside.

    Resolving before the containment check matters: a check on the unresolved string would
    let `link -> /etc` or `a/../../x` walk out of the workspace.
    """
    if raw is None:
        raw = "."
    if not isinstance(raw, str):
        raise ToolError("path must be a string")
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    root = workspace.resolve()
    candidate = (root / raw).resolve()
    if candidate != root and root not in candidate.parents:
        raise ToolError(f"path {raw!r} is outside the workspace")
    return candidate


def _int_arg(args: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = args.get(name, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models often send numbers as strings
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ToolError(f"{name} must be an integer >= {minimum}")
    return value


def _list(args: dict[str, Any], ctx: ToolContext) -> str:
    target = resolve_in_workspace(ctx.workspace, args.get("path", "."))
    if not target.exists():
        raise ToolError(f"no such directory: {args.get('path', '.')}")
    if not target.is_dir():
        raise ToolError(f"not a directory: {args.get('path', '.')}")
    entries = sorted(target.iterdir(), key=lambda p: p.name)
    lines = []
    for entry in entries[:MAX_LIST_ENTRIES]:
        if entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            lines.append(f"{entry.name}\t{entry.stat().st_size} bytes")
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"... {len(entries) - MAX_LIST_ENTRIES} more entries not shown")
    return "\n".join(lines) if lines else "(empty directory)"


def _read(args: dict[str, Any], ctx: ToolContext) -> str:
    if "path" not in args:
        raise ToolError("read_file needs a path")
    target = resolve_in_workspace(ctx.workspace, args["path"])
    if not target.is_file():
        raise ToolError(f"no such file: {args['path']}")
    offset = _int_arg(args, "offset", 1, 1)
    limit = _int_arg(args, "limit", DEFAULT_READ_LINES, 1)
    data = target.read_bytes()
    if b"\x00" in data[:8192]:
        return f"{args['path']} is a binary file ({len(data)} bytes); not shown"
    lines = data.decode("utf-8", errors="replace").splitlines()
    chosen = lines[offset - 1 : offset - 1 + limit]
    body = "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(chosen, start=offset))
    if len(body) > MAX_READ_CHARS:
        body = body[:MAX_READ_CHARS] + "\n... (truncated; read a smaller range with offset/limit)"
    end = offset - 1 + len(chosen)
    if end < len(lines):
        body += f"\n... lines {offset}-{end} of {len(lines)}; continue with offset={end + 1}"
    return body or "(empty file)"


async def list_files(args: dict[str, Any], ctx: ToolContext) -> str:
    return await asyncio.to_thread(_list, args, ctx)


async def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    return await asyncio.to_thread(_read, args, ctx)


LIST_FILES = Tool(
    name="list_files",
    description="List the entries of a directory in the workspace (directories end with /).",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Directory relative to the workspace."}
        },
        "additionalProperties": False,
    },
    handler=list_files,
)

READ_FILE = Tool(
    name="read_file",
    description=(
        "Read a text file in the workspace, with line numbers. Use offset and limit to page "
        "through large files."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "limit": {"type": "integer", "minimum": 1, "description": "Number of lines."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
    handler=read_file,
)


def workspace_tools() -> list[Tool]:
    return [LIST_FILES, READ_FILE]
