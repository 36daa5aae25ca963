"""The workspace's context files (`COURIER.md`, `AGENTS.md`), read the way a prompt may take them.

The server process reads these, not the sandbox, so a plain `open()` would follow whatever
the model left there: `ln -sf /proc/self/environ AGENTS.md` put the server's environment,
its API and upstream keys among it, into the next prompt. They are opened like the file
tools open paths (`app/tools/safe_open.py`): component by component beneath a descriptor on
the workspace, never letting the kernel follow a link. A link that leaves the workspace, a
hard link (it may be another name for a file outside), or anything but a regular file is
refused and logged, and the prompt simply goes without that file.

What the agent itself writes there reaches a prompt only once a person accepts it. Before
and after each tool batch the files are read and hashed (`ContextWatch`), so a change is
seen whatever command spelled it (`n=COURIER; ... > $n.md`, `sed -i`, a script). A change
is *held*: the workspace keeps, per file, the content a person accepted (what was there
before a tool first changed it: their own, or what they approved since) beside what the
tool left, and a pending approval (`context.instruction_change`, no turn waits on it) asks
a person about the new content through `/v1/approvals`. While it is held, every prompt
built from that workspace (a new session, a fork, a rebuild after compaction or new client
instructions) takes the accepted content, or none; once accepted, the new content. A file
no tool has changed is read as it is; so is one a person edited after the tool did.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
import stat
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from app.db.context_store import Asking, FileChange, context_rows, record_change
from app.db.store import Store
from app.security.redact import redact_text
from app.tools.registry import ToolError
from app.tools.safe_open import DIR_FLAGS, OutsideWorkspace, open_beneath

log = logging.getLogger(__name__)

CONTEXT_FILES = ("COURIER.md", "AGENTS.md")
"""Looked up in the workspace; the first one a prompt may take joins its context tier."""
MAX_CONTEXT_FILE_CHARS = 20_000
MAX_CONTEXT_FILE_BYTES = 4 * MAX_CONTEXT_FILE_CHARS
"""Read at most this much: enough for the characters a prompt takes, whatever the encoding."""
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""O_NONBLOCK: a FIFO planted under the name must not hang the server."""
ABSENT = ""
"""The digest of a file that is not there (or was refused): absence is a state too."""
HOLD_QUESTION_S = 30 * 24 * 3600.0
"""How long a question about a held change stays open; unanswered, the change stays held."""


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
        # A plain file right under the root opens in one call, and an absent one fails in
        # one; only a link (ELOOP under O_NOFOLLOW) takes the walk. Read around every tool
        # batch, the walk for two absent files cost a tool turn 3 % of its instructions.
        fd = os.open(name, _FILE_FLAGS, dir_fd=root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            log.warning("context file %s in %s unreadable: %s", name, workspace, exc.strerror)
            return None
        linked = _open_link(workspace, root, name)
        return None if linked is None else _read_regular(workspace, linked, name)
    return _read_regular(workspace, fd, name)


def _open_link(workspace: Path, root: int, name: str) -> int | None:
    """The file a link in the workspace names, resolved beneath it; refused if it leaves."""
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
    return fd


def _read_regular(workspace: Path, fd: int, name: str) -> bytes | None:
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


def workspace_key(workspace: Path) -> str:
    """The name a workspace's held files are kept under (no file-system call)."""
    return os.path.abspath(workspace)


def prompt_context(store: Store, workspace: Path) -> str:
    """The context tier's text for a prompt built now: each file as it is, unless a tool
    changed it and nobody accepted that yet; then as last accepted (or absent)."""
    files = read_context_files(workspace)
    held = context_rows(store, workspace=workspace_key(workspace))
    for file in files:
        row = held.get(file.name)
        text = file.text
        if row is not None and row.held_digest is not None and file.digest == row.held_digest:
            text = row.approved_text
        if text is not None:
            return f"Project context from {file.name}:\n{text}"
    return ""


@dataclass(frozen=True, slots=True)
class ContextWatch:
    """One turn's look at its workspace's context files around each tool batch."""

    store: Store
    workspace: Path
    session_id: str
    turn_id: str
    requested_by: str

    def before(self) -> tuple[ContextFile, ...]:
        return read_context_files(self.workspace)

    async def after(self, before: tuple[ContextFile, ...]) -> None:
        """Hold what the batch changed; runs after a cancelled batch too (the change is
        made all the same), and then lets its commit land before the cancellation goes on."""
        changes = [
            FileChange(b.name, b.digest, b.text, a.digest, a.text)
            for b, a in zip(before, read_context_files(self.workspace), strict=True)
            if a.digest != b.digest
        ]
        if not changes:
            return
        landing = self.store.commit_off_loop(partial(self._hold, changes))
        try:
            await asyncio.shield(landing)
        except asyncio.CancelledError:
            await asyncio.wait({landing})
            raise

    def _hold(self, changes: list[FileChange]) -> None:
        key = workspace_key(self.workspace)
        for change in changes:
            asked = record_change(
                self.store, workspace=key, change=change, asking=self._asking(key, change)
            )
            log.warning(
                "session %s changed context file %s in %s: %s",
                self.session_id,
                change.name,
                key,
                f"held for approval {asked}" if asked else "back to its accepted content",
            )

    def _asking(self, key: str, change: FileChange) -> Asking:
        shown = "(the file was removed)" if change.after_text is None else change.after_text
        return Asking(
            session_id=self.session_id,
            turn_id=self.turn_id,
            requested_by=self.requested_by,
            expires_at=time.time() + HOLD_QUESTION_S,
            summary=redact_text(f"{change.name} in {key}, as a tool left it:\n---\n{shown}"),
            reason="a tool changed an instruction file that later prompts read; until a "
            "person approves, prompts take its last accepted content",
        )
