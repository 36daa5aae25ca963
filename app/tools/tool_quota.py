"""What one session's tools may consume: a plain record, so ToolContext can carry it."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1024**3


@dataclass(frozen=True, slots=True)
class ToolQuota:
    """What one session's tools may consume; built from the profile (app/agent/loop.py)."""

    workspace_bytes: int = 1 * GiB
    """Bytes (allocated on disk) the workspace may hold."""
    disk_reserve_bytes: int = 1 * GiB
    """Free space below which tool writes are refused (Courier's own writes never are)."""
    memory_bytes: int = 2 * GiB
    """Per terminal call: a memory cgroup limit, or RLIMIT_AS where no cgroup can be made."""
    cpu_seconds: int = 600
    """Per process of a terminal call (RLIMIT_CPU)."""
    file_size_bytes: int = 1 * GiB
    """Largest file a terminal call may write (RLIMIT_FSIZE); also capped by the quota left."""
