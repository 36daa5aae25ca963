"""File tools that change or search the workspace: write_file, patch, search_files.

Every path goes through `resolve_in_workspace`, which resolves symlinks before checking
containment, so `..`, absolute paths elsewhere and symlinks that leave the workspace are
all refused the same way. Writes are atomic (temp file in the same directory, then
os.replace): a crash or a concurrent reader sees the old file or the new one, never half.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.tools.registry import Tool, ToolContext, ToolError
from app.tools.workspace import (
    BINARY_SNIFF_BYTES,
    LIST_FILES,
    READ_FILE,
    display_path,
    int_arg,
    is_inside,
    iter_lines,
    path_scope,
    resolve_in_workspace,
    threaded_handler,
)

NEW_FILE_MODE = 0o644
"""mkstemp creates 0600; a file the agent writes should look like one a user wrote."""

DEFAULT_MAX_RESULTS = 100
MAX_RESULTS_CAP = 1000
SEARCH_BYTES_PER_FILE = 1_000_000
SEARCH_BYTES_TOTAL = 50_000_000
"""Caps on what one search reads, so a search of a huge tree answers instead of stalling."""
SEARCH_MAX_FILES = 20_000
MATCH_LINE_CHARS = 300
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".courier",
    }
)
"""Never descended into while walking: VCS internals and caches drown real matches, and
`.courier/spill` holds copies of earlier tool output that would echo every hit twice. Naming
one of them as `path` still searches it."""


def _optional_str(args: dict[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise ToolError(f"{name} must be a string")
    return value


def _required_str(args: dict[str, Any], name: str) -> str:
    value = _optional_str(args, name)
    if value is None:
        raise ToolError(f"{name} is required")
    return value


def _bool_arg(args: dict[str, Any], name: str, default: bool) -> bool:
    value = args.get(name, default)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise ToolError(f"{name} must be true or false")
    return value


def _write_atomic(ctx: ToolContext, target: Path, data: bytes) -> None:
    """Replace `target` with `data` atomically, keeping an existing file's permissions."""
    root = ctx.workspace.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"a parent of {display_path(root, target)} is not a directory") from None
    # Re-check after mkdir: the resolve happened earlier, and the temp file must not land
    # outside if a parent was swapped for a symlink in between.
    if not is_inside(root, target.parent.resolve()):
        raise ToolError(f"path {display_path(root, target)!r} is outside the workspace")
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        # os.replace renames over the final component without following it, so even a
        # symlink planted there after our check is replaced, never written through.
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = _required_str(args, "path")
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    target = resolve_in_workspace(ctx.workspace, raw)
    if target.is_dir():
        raise ToolError(f"{raw} is a directory")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("content is not encodable as UTF-8 (lone surrogate?)") from None
    _write_atomic(ctx, target, data)
    return f"wrote {len(data)} bytes to {display_path(ctx.workspace, target)}"


def _patch(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = _required_str(args, "path")
    old = _required_str(args, "old_string")
    new = _required_str(args, "new_string")
    replace_all = _bool_arg(args, "replace_all", False)
    if not old:
        raise ToolError("old_string must not be empty; use write_file to create a file")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing to change")
    target = resolve_in_workspace(ctx.workspace, raw)
    if target.is_dir():
        raise ToolError(f"{raw} is a directory")
    if not target.is_file():
        raise ToolError(f"no such file: {raw}")
    data = target.read_bytes()
    try:
        # Decoded without newline translation, so CRLF files keep their line endings.
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{raw} is not a UTF-8 text file; patch edits text only") from None
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r\n" not in old:
        # Models write \n; a CRLF file never matches that literally. Matching with the
        # file's own line ending is still an exact match, just in the file's dialect.
        crlf_old, crlf_new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        if text.count(crlf_old):
            old, new, count = crlf_old, crlf_new, text.count(crlf_old)
    if count == 0:
        raise ToolError(f"old_string not found in {raw}")
    if count > 1 and not replace_all:
        raise ToolError(f"old_string occurs {count} times in {raw}; add context or set replace_all")
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    _write_atomic(ctx, target, updated.encode("utf-8"))
    noun = "occurrence" if count == 1 else "occurrences"
    return f"replaced {count} {noun} in {display_path(ctx.workspace, target)}"


@dataclass
class _Search:
    """What one search has read and found so far, so every bound is enforced in one place."""

    max_results: int
    lines: list[str] = field(default_factory=list)
    bytes_read: int = 0
    files_cut: int = 0
    """Files only partly searched because they exceed SEARCH_BYTES_PER_FILE."""
    truncated: list[str] = field(default_factory=list)

    @property
    def full(self) -> bool:
        # One past the limit: finding it is how we know the output really was truncated.
        return len(self.lines) > self.max_results


def _glob_matches(glob: str, rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    if "/" not in glob:
        return fnmatch.fnmatchcase(name, glob)
    # fnmatch's * already crosses "/", so "**/" only needs to also allow zero directories.
    return fnmatch.fnmatchcase(rel, glob) or (
        glob.startswith("**/") and fnmatch.fnmatchcase(rel, glob[3:])
    )


def _candidate_files(root: Path, base: Path, glob: str | None, search: _Search) -> list[Path]:
    """Regular files under `base` that stay inside `root`, sorted, filtered by `glob`."""
    if base.is_file():
        found = [base]
    else:
        found = []
        # followlinks=False: a symlinked directory could loop or lead outside; files that
        # are symlinks are kept only if they resolve inside (checked below).
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
            for name in filenames:
                found.append(Path(dirpath, name))
            if len(found) > SEARCH_MAX_FILES:
                search.truncated.append(f"stopped after {SEARCH_MAX_FILES} files")
                break
    kept = []
    for path in found[:SEARCH_MAX_FILES]:
        rel = display_path(root, path)
        if glob is not None and not _glob_matches(glob, rel):
            continue
        try:
            real = path.resolve()
        except (OSError, RuntimeError):
            continue
        if is_inside(root, real) and real.is_file():
            kept.append(path)
    # Sorted by path components so output is deterministic whatever order the OS lists in.
    return sorted(kept, key=lambda p: p.relative_to(root).parts)


def _grep_file(path: Path, rel: str, regex: re.Pattern[str], search: _Search) -> None:
    budget = min(SEARCH_BYTES_PER_FILE, SEARCH_BYTES_TOTAL - search.bytes_read)
    try:
        with path.open("rb") as fh:
            if b"\x00" in fh.read(BINARY_SNIFF_BYTES):
                return
            fh.seek(0)
            consumed = 0
            for n, (line, _cut) in enumerate(iter_lines(fh, cap=budget), start=1):
                consumed = fh.tell()
                if consumed > budget:
                    search.files_cut += 1
                    break
                if regex.search(line):
                    if len(line) > MATCH_LINE_CHARS:
                        line = line[:MATCH_LINE_CHARS] + " ..."
                    search.lines.append(f"{rel}:{n}: {line}")
                    if search.full:
                        break
            search.bytes_read += min(consumed, budget)
    except OSError:
        return  # unreadable (permissions, vanished mid-walk): skipped like a binary file


def _search(args: dict[str, Any], ctx: ToolContext) -> str:
    pattern = _optional_str(args, "pattern")
    glob = _optional_str(args, "glob")
    use_regex = _bool_arg(args, "regex", True)
    max_results = min(int_arg(args, "max_results", DEFAULT_MAX_RESULTS, 1), MAX_RESULTS_CAP)
    if not pattern and not glob:
        raise ToolError("search_files needs a pattern (file contents) or a glob (file names)")
    raw_base = args.get("path", ".")
    base = resolve_in_workspace(ctx.workspace, raw_base)
    if not base.exists():
        raise ToolError(f"no such file or directory: {raw_base}")
    root = ctx.workspace.resolve()
    search = _Search(max_results=max_results)
    files = _candidate_files(root, base, glob, search)

    if not pattern:
        # Glob only: list matching names; the model asked where files are, not what's in them.
        names = [display_path(root, p) for p in files]
        shown = names[:max_results]
        if len(names) > max_results:
            search.truncated.append(f"showing {max_results} of {len(names)} files")
        if not shown:
            return f"no files matching {glob!r} under {display_path(root, base)}"
        return _with_notes("\n".join(shown), search)

    try:
        regex = re.compile(pattern if use_regex else re.escape(pattern))
    except re.error as exc:
        raise ToolError(
            f"invalid regex {pattern!r}: {exc}; set regex=false for a literal"
        ) from None
    for path in files:
        if search.full:
            break
        if search.bytes_read >= SEARCH_BYTES_TOTAL:
            search.truncated.append(f"stopped after reading {SEARCH_BYTES_TOTAL} bytes")
            break
        _grep_file(path, display_path(root, path), regex, search)
    if search.full:
        del search.lines[max_results:]
        search.truncated.insert(0, f"showing the first {max_results} matches")
    if search.files_cut:
        search.truncated.append(
            f"{search.files_cut} file(s) searched only in their first {SEARCH_BYTES_PER_FILE} bytes"
        )
    if not search.lines:
        where = display_path(root, base)
        return _with_notes(f"no matches for {pattern!r} under {where}", search)
    return _with_notes("\n".join(search.lines), search)


def _with_notes(body: str, search: _Search) -> str:
    if not search.truncated:
        return body
    return body + "\n... truncated: " + "; ".join(search.truncated) + " (narrow path or pattern)"


write_file = threaded_handler(_write)
patch = threaded_handler(_patch)
search_files = threaded_handler(_search)


WRITE_FILE = Tool(
    name="write_file",
    description=(
        "Create or overwrite a file in the workspace with the given content (parent "
        "directories are created). Prefer patch for small edits to an existing file."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    handler=write_file,
    read_only=False,
    path_scope=path_scope("write"),
)

PATCH = Tool(
    name="patch",
    description=(
        "Edit a file in the workspace by replacing an exact string. old_string must match "
        "the file exactly (whitespace included) and be unique unless replace_all is true."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "old_string": {"type": "string", "description": "Exact text to replace."},
            "new_string": {"type": "string", "description": "Replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring a unique one.",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    },
    handler=patch,
    read_only=False,
    path_scope=path_scope("write"),
)

SEARCH_FILES = Tool(
    name="search_files",
    description=(
        "Search file contents in the workspace with a regular expression (results as "
        "path:line: text), or find files by name with only a glob. Binary files and "
        "VCS/cache directories are skipped."
    ),
    parameters={
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "description": "Regex (or literal text with regex=false) to find in contents.",
            },
            "path": {
                "type": "string",
                "description": "Directory or file to search, relative to the workspace (default .)",
            },
            "glob": {
                "type": "string",
                "description": "Only files whose name matches, e.g. *.py; alone, lists them.",
            },
            "regex": {"type": "boolean", "description": "Treat pattern as a regex (default)."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS_CAP,
                "description": f"Most lines to return (default {DEFAULT_MAX_RESULTS}).",
            },
        },
        "additionalProperties": False,
    },
    handler=search_files,
    read_only=True,
    # The search root is claimed as a reader, so a search batched after a write into that
    # tree is ordered behind the write.
    path_scope=path_scope("read", default="."),
)


def file_tools() -> list[Tool]:
    """All built-in file tools, in a fixed order."""
    return [LIST_FILES, READ_FILE, WRITE_FILE, PATCH, SEARCH_FILES]
