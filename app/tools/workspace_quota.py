"""Per-workspace byte quota and the data directory's free-space reserve for tool writes.

A model wrote 5.0 GB into its workspace in 28 s, and the database shares the filesystem,
so a full disk broke every session. Each workspace therefore has a byte quota (checked
before every file-tool write, watched during and checked after every terminal call), and
tool writes are refused while the filesystem's free space is under a reserve, so the
database (whose writes are never checked here) always has room to record what happened.
"""

from __future__ import annotations

import os
import stat

from app.config import GiB, ToolQuota
from app.tools.registry import ToolError

__all__ = ["check_write", "over_quota_note", "usage_bytes"]


def usage_bytes(root_fd: int) -> int:
    """Bytes allocated to everything under `root_fd`, walked by descriptor, no link followed.

    Allocated blocks, not apparent sizes: a sparse 5 GB file costs the disk nothing, a
    directory of a million empty files costs it a lot.
    """
    total = 0
    stack = [os.dup(root_fd)]
    while stack:
        fd = stack.pop()
        try:
            with os.scandir(fd) as scan:
                entries = list(scan)
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    try:
                        stack.append(
                            os.open(
                                entry.name,
                                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=fd,
                            )
                        )
                    except OSError:
                        continue
        finally:
            os.close(fd)
    return total


def free_bytes(root_fd: int) -> int:
    st = os.fstatvfs(root_fd)
    return st.f_bavail * st.f_frsize


def _size(n: int) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_write(quota: ToolQuota, root_fd: int, *, adding: int, replacing: int = 0) -> None:
    """Refuse a write of `adding` bytes (over `replacing` existing ones) past a limit."""
    free = free_bytes(root_fd)
    if free - adding < quota.disk_reserve_bytes:
        raise ToolError(
            f"the server's disk is nearly full ({_size(free)} free, "
            f"{_size(quota.disk_reserve_bytes)} reserved): file writes are refused; free "
            "space or tell the operator"
        )
    used = usage_bytes(root_fd)
    after = used - replacing + adding
    if after > quota.workspace_bytes:
        raise ToolError(
            f"workspace quota exceeded: this write would bring the workspace to {_size(after)} "
            f"of its {_size(quota.workspace_bytes)}; delete files you no longer need first"
        )


def over_quota_note(quota: ToolQuota, root_fd: int) -> str | None:
    """After a terminal call: a note for the model when the workspace is past its quota."""
    used = usage_bytes(root_fd)
    if used <= quota.workspace_bytes:
        return None
    return (
        f"note: the workspace holds {_size(used)}, over its {_size(quota.workspace_bytes)} "
        "quota; file writes are refused until you delete files"
    )
