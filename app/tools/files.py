"""File tools that change or search the workspace: write_file, patch, search_files.

Every path is opened through `app/tools/safe_open.py`: component by component from a
descriptor on the workspace, never following a link the kernel would resolve for us, so
`..`, absolute paths elsewhere, symlinks that leave and symlinks swapped in mid-call are
all refused the same way. Writes are atomic (temp file in the same directory, renamed
through its descriptor): a crash or a concurrent reader sees the old file or the new one.
Regexes run on RE2 (linear time), never Python's backtracking `re`.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Any

from app.tools.linear_regex import LinearRegex, RegexError, compile_linear
from app.tools.registry import Tool, ToolContext, ToolError
from app.tools.safe_open import DIR_FLAGS, open_beneath, walk, write_atomic
from app.tools.workspace import (
    BINARY_SNIFF_BYTES,
    int_arg,
    iter_lines,
    open_in_workspace,
    open_regular_file,
    path_scope,
    threaded_handler,
    workspace_fd,
)
from app.tools.workspace_quota import check_write

NEW_FILE_MODE = 0o644
"""mkstemp creates 0600; a file the agent writes should look like one a user wrote."""

DEFAULT_MAX_RESULTS = 100
MAX_RESULTS_CAP = 1000
SEARCH_BYTES_PER_FILE = 1_000_000
SEARCH_BYTES_TOTAL = 50_000_000
"""Caps on what one search reads, so a search of a huge tree answers instead of stalling."""
SEARCH_MAX_FILES = 20_000
SEARCH_TIMEOUT_S = 30.0
"""Wall-clock bound on one search; past it the tool returns an error, not a partial list."""
MAX_SEARCH_DEPTH = 64
"""Deeper directories are skipped: each level holds a descriptor open during the walk."""
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


def _write_beneath(ctx: ToolContext, root_fd: int, raw: str, data: bytes) -> str:
    """Atomically replace the file `raw` names with `data`; returns its canonical path.

    The parent is resolved (and created) through descriptors, and the temp file is renamed
    relative to the parent's descriptor, so a directory swapped for a symlink mid-call
    cannot redirect the write. An existing file keeps its permissions.
    """
    try:
        with walk(ctx.workspace, root_fd, raw, create_parents=True) as w:
            if w.name is None:
                raise ToolError(f"{raw} is a directory")
            try:
                existing: os.stat_result | None = os.stat(
                    w.name, dir_fd=w.dir_fd, follow_symlinks=False
                )
            except FileNotFoundError:
                existing = None
            mode = existing.st_mode if existing is not None else None
            if mode is not None and stat.S_ISDIR(mode):
                raise ToolError(f"{raw} is a directory")
            keep = stat.S_IMODE(mode) if mode is not None and stat.S_ISREG(mode) else None
            replacing = existing.st_blocks * 512 if existing is not None else 0
            check_write(ctx.quota, root_fd, adding=len(data), replacing=replacing)
            write_atomic(w.dir_fd, w.name, data, mode=NEW_FILE_MODE if keep is None else keep)
            return w.rel
    except (FileExistsError, NotADirectoryError):
        raise ToolError(f"a parent of {raw} is not a directory") from None


def _write(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = _required_str(args, "path")
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("content must be a string")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError("content is not encodable as UTF-8 (lone surrogate?)") from None
    with workspace_fd(ctx) as root_fd:
        rel = _write_beneath(ctx, root_fd, raw, data)
    return f"wrote {len(data)} bytes to {rel}"


def _patch(args: dict[str, Any], ctx: ToolContext) -> str:
    raw = _required_str(args, "path")
    old = _required_str(args, "old_string")
    new = _required_str(args, "new_string")
    replace_all = _bool_arg(args, "replace_all", False)
    if not old:
        raise ToolError("old_string must not be empty; use write_file to create a file")
    if old == new:
        raise ToolError("old_string and new_string are identical; nothing to change")
    with workspace_fd(ctx) as root_fd:
        with os.fdopen(open_regular_file(ctx, root_fd, raw), "rb") as fh:
            data = fh.read()
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
            raise ToolError(
                f"old_string occurs {count} times in {raw}; add context or set replace_all"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        rel = _write_beneath(ctx, root_fd, raw, updated.encode("utf-8"))
    noun = "occurrence" if count == 1 else "occurrences"
    return f"replaced {count} {noun} in {rel}"


@dataclass
class _Search:
    """What one search has read and found so far, so every bound is enforced in one place."""

    max_results: int
    lines: list[str] = field(default_factory=list)
    bytes_read: int = 0
    files_cut: int = 0
    """Files only partly searched because they exceed SEARCH_BYTES_PER_FILE."""
    truncated: list[str] = field(default_factory=list)
    deadline: float = float("inf")

    def note(self, message: str) -> None:
        if message not in self.truncated:
            self.truncated.append(message)

    def check_deadline(self) -> None:
        # RE2 bounds each match; this bounds the whole walk (a huge tree on a slow disk).
        if time.monotonic() > self.deadline:
            raise ToolError(
                f"search_files timed out after {SEARCH_TIMEOUT_S:g} s; narrow path, glob or pattern"
            )

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


def _scan_tree(dir_fd: int, prefix: tuple[str, ...], search: _Search, out: list[_Entry]) -> None:
    """Collect files under `dir_fd` in path-component order, never following a link.

    Each subdirectory is opened with O_NOFOLLOW relative to its parent's descriptor, so a
    directory swapped for a symlink mid-walk is skipped, not entered. Symlinked files are
    collected and resolved later, through the same checks as any path the model names.
    """
    if len(prefix) > MAX_SEARCH_DEPTH:
        search.note(f"directories deeper than {MAX_SEARCH_DEPTH} levels skipped")
        return
    with os.scandir(dir_fd) as scan:
        entries = sorted(scan, key=lambda e: e.name)
    for entry in entries:
        if len(out) > SEARCH_MAX_FILES:
            return
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue  # vanished mid-walk
        if stat.S_ISDIR(mode):
            if entry.name in SKIPPED_DIRS:
                continue
            try:
                sub = os.open(entry.name, DIR_FLAGS, dir_fd=dir_fd)
            except OSError:
                continue  # swapped for a link, removed or unreadable: not entered
            try:
                _scan_tree(sub, (*prefix, entry.name), search, out)
            finally:
                os.close(sub)
        elif stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            out.append(_Entry("/".join((*prefix, entry.name)), stat.S_ISLNK(mode)))


@dataclass(frozen=True, slots=True)
class _Entry:
    rel: str
    is_link: bool


def _open_candidate(ctx: ToolContext, root_fd: int, rel: str) -> int | None:
    """A descriptor on the regular file at `rel`, or None (outside, gone, not a file)."""
    try:
        fd, _ = open_beneath(ctx.workspace, root_fd, rel, directory=False)
    except (OSError, ToolError):
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _candidate_files(
    ctx: ToolContext, root_fd: int, raw_base: object, glob: str | None, search: _Search
) -> tuple[str, list[str]]:
    """(canonical base, regular files under it that stay inside), filtered by `glob`."""
    try:
        base_fd = open_in_workspace(ctx, root_fd, raw_base, directory=True)
    except ToolError as exc:
        if not str(exc).startswith(("not a directory", "no such")):
            raise
        fd = _open_candidate(ctx, root_fd, str(raw_base))
        if fd is None:
            raise ToolError(f"no such file or directory: {raw_base}") from None
        os.close(fd)
        base_rel = _canonical(ctx, root_fd, str(raw_base))
        return base_rel, [base_rel]
    entries: list[_Entry] = []
    try:
        base_rel = _canonical(ctx, root_fd, str(raw_base if raw_base is not None else "."))
        _scan_tree(base_fd, () if base_rel == "." else tuple(base_rel.split("/")), search, entries)
    finally:
        os.close(base_fd)
    if len(entries) > SEARCH_MAX_FILES:
        search.note(f"stopped after {SEARCH_MAX_FILES} files")
        del entries[SEARCH_MAX_FILES:]
    kept = []
    for entry in entries:
        if glob is not None and not _glob_matches(glob, entry.rel):
            continue
        if entry.is_link:
            # Kept only if it resolves to a regular file inside; checked again when read.
            fd = _open_candidate(ctx, root_fd, entry.rel)
            if fd is None:
                continue
            os.close(fd)
        kept.append(entry.rel)
    return base_rel, kept


def _canonical(ctx: ToolContext, root_fd: int, raw: str) -> str:
    with walk(ctx.workspace, root_fd, raw) as w:
        return w.rel


def _grep_file(fd: int, rel: str, regex: LinearRegex, search: _Search) -> None:
    budget = min(SEARCH_BYTES_PER_FILE, SEARCH_BYTES_TOTAL - search.bytes_read)
    try:
        with os.fdopen(fd, "rb") as fh:
            if b"\x00" in fh.read(BINARY_SNIFF_BYTES):
                return
            fh.seek(0)
            consumed = 0
            for n, (line, _cut) in enumerate(iter_lines(fh, cap=budget), start=1):
                if n % 1024 == 0:
                    search.check_deadline()
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
        return  # unreadable (permissions, I/O error): skipped like a binary file


def _search(args: dict[str, Any], ctx: ToolContext) -> str:
    pattern = _optional_str(args, "pattern")
    glob = _optional_str(args, "glob")
    use_regex = _bool_arg(args, "regex", True)
    max_results = min(int_arg(args, "max_results", DEFAULT_MAX_RESULTS, 1), MAX_RESULTS_CAP)
    if not pattern and not glob:
        raise ToolError("search_files needs a pattern (file contents) or a glob (file names)")
    regex = None
    if pattern:
        try:
            regex = compile_linear(pattern, literal=not use_regex)
        except RegexError as exc:
            raise ToolError(
                f"invalid regex {pattern!r}: {exc}; the search engine runs in linear time "
                "(RE2), so backreferences and lookaround are not supported; set regex=false "
                "for a literal"
            ) from None
    search = _Search(max_results=max_results, deadline=time.monotonic() + SEARCH_TIMEOUT_S)
    with workspace_fd(ctx) as root_fd:
        base, files = _candidate_files(ctx, root_fd, args.get("path", "."), glob, search)
        if regex is None:
            # Glob only: list matching names; the model asked where files are, not contents.
            shown = files[:max_results]
            if len(files) > max_results:
                search.note(f"showing {max_results} of {len(files)} files")
            if not shown:
                return f"no files matching {glob!r} under {base}"
            return _with_notes("\n".join(shown), search)
        for rel in files:
            if search.full:
                break
            if search.bytes_read >= SEARCH_BYTES_TOTAL:
                search.note(f"stopped after reading {SEARCH_BYTES_TOTAL} bytes")
                break
            search.check_deadline()
            fd = _open_candidate(ctx, root_fd, rel)
            if fd is not None:
                _grep_file(fd, rel, regex, search)
    if search.full:
        del search.lines[max_results:]
        search.truncated.insert(0, f"showing the first {max_results} matches")
    if search.files_cut:
        search.note(
            f"{search.files_cut} file(s) searched only in their first {SEARCH_BYTES_PER_FILE} bytes"
        )
    if not search.lines:
        return _with_notes(f"no matches for {pattern!r} under {base}", search)
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
