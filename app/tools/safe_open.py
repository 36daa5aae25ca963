"""Open files beneath the workspace through directory descriptors, so a race cannot leave it.

Checking a path and then opening it again is a TOCTOU hole: a shared workspace's terminal
can swap a checked directory for a symlink to a host directory between the two steps (an
atomic rename exchange), and the reopen lands on the host. Here every step is relative to
a descriptor already proven to be inside: each component is opened with O_NOFOLLOW from
its parent's descriptor, a symlink is never followed by the kernel but read with
readlinkat and its target walked the same way (refused if it climbs above the root), and
`..` pops our own stack of descriptors instead of asking the filesystem where the parent
is. The caller then works on the descriptor it got back, never on a path.

A swap that lands between our lstat and our open shows up as ELOOP (the directory became a
link) or ENOENT; we then re-examine that component, so the worst a racing attacker gets is
a "symlink loop" or "no such file" error, never a host file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.tools.registry import ToolError

MAX_LINK_HOPS = 40
"""Symlinks (and swap retries) followed in one resolution, as the kernel's own ELOOP limit."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted under a file's name must not hang a worker thread.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class OutsideWorkspace(ToolError):
    """The path (or a symlink on it) leads out of the workspace."""


@dataclass(slots=True)
class Walk:
    """Where a resolution ended: an open parent directory and the final component's name.

    `name` is None when the path is the root itself. The final component is never a
    symlink (those are followed); it may not exist. `parts` is the canonical path relative
    to the root, for messages and claims.
    """

    dir_fd: int
    name: str | None
    parts: tuple[str, ...]

    @property
    def rel(self) -> str:
        return "/".join(self.parts) if self.parts else "."


def open_root(workspace: Path) -> int:
    """A descriptor on the workspace directory (created if missing)."""
    workspace.mkdir(parents=True, exist_ok=True)
    return os.open(workspace, DIR_FLAGS & ~os.O_NOFOLLOW)


def _root_prefixes(workspace: Path) -> list[str]:
    """Absolute spellings of the root that absolute paths and links may start with."""
    spellings = {str(workspace.resolve()), os.path.abspath(workspace)}
    return sorted(spellings, key=len, reverse=True)


def _relative_parts(workspace: Path, raw: str, shown: str) -> list[str]:
    if not raw.startswith("/"):
        return raw.split("/")
    for prefix in _root_prefixes(workspace):
        if raw == prefix or raw.startswith(prefix.rstrip("/") + "/"):
            return raw[len(prefix) :].split("/")
    raise OutsideWorkspace(f"path {shown!r} is outside the workspace")


@contextlib.contextmanager
def walk(
    workspace: Path, root_fd: int, raw: str, *, create_parents: bool = False
) -> Iterator[Walk]:
    """Resolve `raw` beneath `root_fd`; the yielded `dir_fd` is closed on exit."""
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    pending = deque(_relative_parts(workspace, raw, raw))
    # (fd, name) per directory entered; the root's fd is a dup so closing all is uniform.
    stack: list[tuple[int, str]] = [(os.dup(root_fd), "")]
    hops = 0

    def hop() -> None:
        nonlocal hops
        hops += 1
        if hops > MAX_LINK_HOPS:
            raise ToolError(f"cannot resolve path {raw!r}: symlink loop")

    try:
        while pending:
            comp = pending.popleft()
            if comp in ("", "."):
                continue
            if comp == "..":
                if len(stack) == 1:
                    raise OutsideWorkspace(f"path {raw!r} is outside the workspace")
                os.close(stack.pop()[0])
                continue
            cur = stack[-1][0]
            last = not any(p not in ("", ".") for p in pending)
            try:
                st = os.stat(comp, dir_fd=cur, follow_symlinks=False)
            except FileNotFoundError:
                if last:
                    yield Walk(cur, comp, (*_names(stack), comp))
                    return
                if not create_parents:
                    # As realpath does past a missing directory: the rest is lexical, so
                    # `nodir/../../x` reads as the escape it is, not as "no such file".
                    _climb_check(len(stack) - 1, [comp, *pending], raw)
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(comp, 0o755, dir_fd=cur)
                pending.appendleft(comp)  # re-examine: it may have been swapped already
                hop()
                continue
            if stat.S_ISLNK(st.st_mode):
                hop()
                parts = _link_parts(workspace, raw, stack, comp)
                if parts is None:  # swapped back meanwhile: look again
                    pending.appendleft(comp)
                    continue  # (already counted as a hop: a swap loop stays bounded)
                pending.extendleft(reversed(parts))
                continue
            if last:
                yield Walk(cur, comp, (*_names(stack), comp))
                return
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
            try:
                fd = os.open(comp, DIR_FLAGS, dir_fd=cur)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOENT, errno.ENOTDIR):
                    pending.appendleft(comp)  # changed since the lstat: look again
                    hop()
                    continue
                raise
            stack.append((fd, comp))
        # Only "." and ".." were left: the path names a directory on our stack.
        if len(stack) == 1:
            yield Walk(stack[0][0], None, ())
            return
        fd, name = stack.pop()
        os.close(fd)
        yield Walk(stack[-1][0], name, (*_names(stack), name))
    finally:
        for fd, _ in stack:
            os.close(fd)


def _link_parts(
    workspace: Path, raw: str, stack: list[tuple[int, str]], comp: str
) -> list[str] | None:
    """The components a symlink `comp` (in the directory atop `stack`) points to, to walk
    next; None if it is no longer a link. An absolute target starts again from the root, so
    every directory entered is closed; one outside the workspace is refused first."""
    try:
        target = os.readlink(comp, dir_fd=stack[-1][0])
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise
    if not target.startswith("/"):
        return target.split("/")
    parts = _relative_parts(workspace, target, raw)
    while len(stack) > 1:
        os.close(stack.pop()[0])
    return parts


def _climb_check(depth: int, parts: list[str], raw: str) -> None:
    for part in parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                raise OutsideWorkspace(f"path {raw!r} is outside the workspace")
        elif part not in ("", "."):
            depth += 1


def _names(stack: list[tuple[int, str]]) -> tuple[str, ...]:
    return tuple(name for _, name in stack[1:])


def open_beneath(workspace: Path, root_fd: int, raw: str, *, directory: bool) -> tuple[int, str]:
    """Open the file or directory `raw` names; returns (fd, canonical relative path).

    The open of the final component uses O_NOFOLLOW, so if it turned into a symlink after
    the walk we resolve again rather than let the kernel follow it.
    """
    flags = DIR_FLAGS if directory else _FILE_FLAGS
    for _ in range(MAX_LINK_HOPS):
        with walk(workspace, root_fd, raw) as w:
            if w.name is None:
                return os.dup(w.dir_fd), "."
            try:
                return os.open(w.name, flags, dir_fd=w.dir_fd), w.rel
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
    raise ToolError(f"cannot resolve path {raw!r}: symlink loop")


def write_atomic(dir_fd: int, name: str, data: bytes, *, mode: int) -> None:
    """Replace `name` in `dir_fd` with `data` via a temp file renamed in the same directory.

    The rename is relative to the directory descriptor and replaces the final component
    without following it: a symlink planted there after our checks is replaced, never
    written through, and a reader sees the old file or the new one, never half.
    """
    # Short, fixed-size temp names: a long target name plus a prefix could pass NAME_MAX.
    tmp = f".courier-{secrets.token_hex(6)}.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
