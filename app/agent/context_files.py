"""The workspace's context files (`COURIER.md`, `AGENTS.md`), read the way a prompt may take them.

The server process reads these, not the sandbox, so a plain `open()` would follow whatever
the model left there: `ln -sf /proc/self/environ AGENTS.md` put the server's environment,
its API and upstream keys among it, into the next prompt. They are opened like the file
tools open paths (`app/tools/beneath.py`): component by component beneath a descriptor on
the workspace, never letting the kernel follow a link. A link that leaves the workspace, a
hard link (it may be another name for a file outside), or anything but a regular file is
refused and logged, and the prompt simply goes without that file.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from app.tools.beneath import DIR_FLAGS, OutsideWorkspace, open_beneath
from app.tools.registry import ToolError

log = logging.getLogger(__name__)

CONTEXT_FILES = ("COURIER.md", "AGENTS.md")
"""Looked up in the workspace; the first one a prompt may take joins its context tier."""
MAX_CONTEXT_FILE_CHARS = 20_000
MAX_CONTEXT_FILE_BYTES = 4 * MAX_CONTEXT_FILE_CHARS
"""Read at most this much: enough for the characters a prompt takes, whatever the encoding."""
ABSENT = ""
"""The digest of a file that is not there (or was refused): absence is a state too."""


@dataclass(frozen=True, slots=True)
class ContextFile:
    """One context file as read now: its name and content, None when absent or refused."""

    name: str
    data: bytes | None

    @property
    def digest(self) -> str:
        return ABSENT if self.data is None else hashlib.sha256(self.data).hexdigest()

    @property
    def text(self) -> str | None:
        """The text a prompt would take from it."""
        if self.data is None:
            return None
        return self.data.decode("utf-8", errors="replace")[:MAX_CONTEXT_FILE_CHARS]


def read_context_files(workspace: Path) -> tuple[ContextFile, ...]:
    """Every context file's current content; a missing workspace has none (and stays missing)."""
    try:
        root = os.open(workspace, DIR_FLAGS & ~os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            log.warning("context files: cannot open workspace %s: %s", workspace, exc.strerror)
        return tuple(ContextFile(name, None) for name in CONTEXT_FILES)
    try:
        return tuple(ContextFile(name, _read(workspace, root, name)) for name in CONTEXT_FILES)
    finally:
        os.close(root)


def _read(workspace: Path, root: int, name: str) -> bytes | None:
    try:
        fd, _ = open_beneath(workspace, root, name, directory=False)
    except FileNotFoundError:
        return None
    except (OutsideWorkspace, ToolError) as exc:
        # The model can plant any link here; it is a refusal worth an operator's eye.
        log.warning("context file %s in %s refused: %s", name, workspace, exc)
        return None
    except OSError as exc:
        log.warning("context file %s in %s unreadable: %s", name, workspace, exc.strerror)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            log.warning(
                "context file %s in %s refused: not a regular file with one name", name, workspace
            )
            return None
        chunks: list[bytes] = []
        left = MAX_CONTEXT_FILE_BYTES
        while left > 0 and (chunk := os.read(fd, left)):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        log.warning("context file %s in %s unreadable: %s", name, workspace, exc.strerror)
        return None
    finally:
        os.close(fd)


def first_context(files: tuple[ContextFile, ...]) -> str:
    """The context tier's text from the first file present; none present, none."""
    for file in files:
        if file.text is not None:
            return f"Project context from {file.name}:\n{file.text}"
    return ""
