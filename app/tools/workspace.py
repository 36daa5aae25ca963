"""Workspace tools: list and read files inside the session's workspace, nowhere else.

The path helpers here are shared by every file tool (`app/tools/files.py`): one place
decides what "inside the workspace" means, so readers, writers and the scheduler's path
claims can never disagree about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from app.tools.registry import (
    Access,
    PathClaim,
    PathScope,
    Tool,
    ToolContext,
    ToolError,
    ToolHandler,
)
from app.tools.safe_open import open_beneath, open_root

MAX_LIST_ENTRIES = 500
MAX_READ_CHARS = 100_000
DEFAULT_READ_LINES = 2000
LINE_BYTES_CAP = 1_000_000
"""Longest line held in memory; a longer one is cut, so a huge one-line file cannot OOM us."""
BINARY_SNIFF_BYTES = 8192


def resolve_in_workspace(workspace: Path, raw: object) -> Path:
    """Resolve `raw` inside `workspace`, following symlinks, and refuse anything outside.

    Resolving before the containment check matters: a check on the unresolved string would
    let `link -> /etc` or `a/../../x` walk out of the workspace. An absolute path is fine
    as long as it resolves inside (models often echo back the absolute paths they saw).
    """
    if raw is None:
        raw = "."
    if not isinstance(raw, str):
        raise ToolError("path must be a string")
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    try:
        root = workspace.resolve()
        candidate = (root / raw).resolve()
    except RuntimeError:
        # How Python 3.11 reports a symlink loop; its text names the absolute host path.
        raise ToolError(f"cannot resolve path {raw!r}: symlink loop") from None
    except OSError as exc:
        raise ToolError(f"cannot resolve path {raw!r}: {exc.strerror or 'I/O error'}") from None
    if not is_inside(root, candidate):
        raise ToolError(f"path {raw!r} is outside the workspace")
    return candidate


def is_inside(root: Path, candidate: Path) -> bool:
    """Whether resolved `candidate` is `root` or below it (by path components, not prefix)."""
    return candidate == root or root in candidate.parents


def display_path(workspace: Path, target: Path) -> str:
    """`target` relative to the workspace, as the model should write it back to us."""
    try:
        rel = target.relative_to(workspace.resolve())
    except ValueError:
        return str(target)
    return rel.as_posix() if rel.parts else "."


def path_scope(access: Access, *, default: str | None = None) -> PathScope:
    """A path-scope function claiming the canonical target of the call's `path` argument.

    Anything that cannot be resolved inside the workspace yields None: the scheduler makes
    the call a barrier, and the handler then reports the error to the model.
    """

    def scope(args: dict[str, Any], ctx: ToolContext) -> list[PathClaim] | None:
        raw = args.get("path", default)
        if raw is None:
            return None
        try:
            return [PathClaim(resolve_in_workspace(ctx.workspace, raw), access)]
        except ToolError:
            return None

    return scope


def int_arg(args: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = args.get(name, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models often send numbers as strings
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ToolError(f"{name} must be an integer >= {minimum}")
    return value


def iter_lines(fh: IO[bytes], *, cap: int = LINE_BYTES_CAP) -> Iterator[tuple[str, bool]]:
    """Yield (text, was_cut) per line, splitting on b"\\n" only, like grep and sed.

    Splitting bytes on newline (never inside a UTF-8 sequence) keeps line numbers the same
    as the terminal's tools, which str.splitlines() would not (it also splits on \\v, \\f,
    U+2028, ...). A line longer than `cap` is cut and the rest skipped, not held in memory.
    """
    while True:
        chunk = fh.readline(cap)
        if not chunk:
            return
        cut = False
        if not chunk.endswith(b"\n") and len(chunk) >= cap:
            cut = True
            while True:
                rest = fh.readline(cap)
                if not rest or rest.endswith(b"\n"):
                    break
        text = chunk.decode("utf-8", errors="replace").rstrip("\n")
        yield text.removesuffix("\r"), cut


@contextlib.contextmanager
def workspace_fd(ctx: ToolContext) -> Iterator[int]:
    """A descriptor on the session's workspace: every file tool works relative to it."""
    fd = open_root(ctx.workspace)
    try:
        yield fd
    finally:
        os.close(fd)


def open_in_workspace(ctx: ToolContext, root_fd: int, raw: object, *, directory: bool) -> int:
    """Open `raw` beneath the workspace (see app/tools/safe_open.py); errors the model reads."""
    if raw is None:
        raw = "."
    if not isinstance(raw, str):
        raise ToolError("path must be a string")
    try:
        fd, _rel = open_beneath(ctx.workspace, root_fd, raw, directory=directory)
    except FileNotFoundError:
        kind = "directory" if directory else "file"
        raise ToolError(f"no such {kind}: {raw}") from None
    except NotADirectoryError:
        raise ToolError(f"not a directory: {raw}") from None
    return fd


def _list(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = args.get("path", ".")
    with workspace_fd(ctx) as root_fd:
        fd = open_in_workspace(ctx, root_fd, raw, directory=True)
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
            lines = []
            for entry in entries[:MAX_LIST_ENTRIES]:
                # Never follow a link here: a dangling one would fail the whole listing, and
                # one pointing outside would leak facts (its size) about files beyond it.
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while we listed
                if stat.S_ISLNK(st.st_mode):
                    lines.append(f"{entry.name}@\t(symbolic link)")
                elif stat.S_ISDIR(st.st_mode):
                    lines.append(f"{entry.name}/")
                else:
                    lines.append(f"{entry.name}\t{st.st_size} bytes")
        finally:
            os.close(fd)
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"... {len(entries) - MAX_LIST_ENTRIES} more entries not shown")
    return "\n".join(lines) if lines else "(empty directory)"


def open_regular_file(ctx: ToolContext, root_fd: int, raw: object) -> int:
    """A descriptor on the regular file `raw` names, checked on the descriptor itself."""
    fd = open_in_workspace(ctx, root_fd, raw, directory=False)
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return fd
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise ToolError(f"{raw} is a directory; use list_files")
    raise ToolError(f"{raw} is not a regular file")


def _read(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = args.get("path")
    if raw is None:
        raise ToolError("read_file needs a path")
    offset = int_arg(args, "offset", 1, 1)
    limit = int_arg(args, "limit", DEFAULT_READ_LINES, 1)
    shown: list[str] = []
    size = used = total = 0
    last_shown = offset - 1
    full = False  # the character budget is spent; later lines are only counted
    with workspace_fd(ctx) as root_fd, os.fdopen(open_regular_file(ctx, root_fd, raw), "rb") as fh:
        head = fh.read(BINARY_SNIFF_BYTES)
        size = os.fstat(fh.fileno()).st_size
        if b"\x00" in head:
            return f"{raw} is a binary file ({size} bytes); not shown"
        fh.seek(0)
        # Streamed, not read whole: the total line count is worth a scan, not a 1 GB string.
        for n, (line, cut) in enumerate(iter_lines(fh), start=1):
            total = n
            if full or n < offset or n >= offset + limit:
                continue
            rendered = f"{n:>6}\t{line}" + (" ... (line cut)" if cut else "")
            if used + len(rendered) + 1 > MAX_READ_CHARS:
                full = True
                if not shown:  # one enormous line: show what fits rather than nothing
                    shown.append(
                        rendered[:MAX_READ_CHARS] + f" ... (line cut at {MAX_READ_CHARS} chars)"
                    )
                    last_shown = n
                continue
            shown.append(rendered)
            used += len(rendered) + 1
            last_shown = n
    if total == 0:
        return "(empty file)"
    if offset > total:
        raise ToolError(f"offset {offset} is past the end of {raw} ({total} lines)")
    body = "\n".join(shown)
    if full and last_shown < min(total, offset + limit - 1):
        body += "\n... (truncated; read a smaller range with offset/limit)"
    if last_shown < total:
        body += (
            f"\n... lines {offset}-{last_shown} of {total}; continue with offset={last_shown + 1}"
        )
    return body


def threaded_handler(fn: Callable[[dict[str, Any], ToolContext], str]) -> ToolHandler:
    """Run `fn` in a worker thread; an OSError (permissions, disk full) is the model's to read.

    Without this, EACCES on a read-only file would surface as an opaque internal error,
    though the model could act on it (pick another path, tell the user).
    """

    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            return await asyncio.to_thread(fn, args, ctx)
        except OSError as exc:
            # strerror only: the filename is an absolute host path the model need not see.
            raise ToolError(f"{args.get('path', '.')}: {exc.strerror or 'I/O error'}") from None

    return handler


list_files = threaded_handler(_list)
read_file = threaded_handler(_read)


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
    read_only=True,
    path_scope=path_scope("read", default="."),
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
    read_only=True,
    path_scope=path_scope("read"),
    # The spill preview tells the model to page the spilled file back with read_file, so
    # read_file's own output must never be spilled (that would recurse); it caps itself.
    spill_exempt=True,
)
