"""A memory cgroup per sandboxed command, so one call cannot take the host's RAM.

`bytearray(3 GiB)` succeeded in the sandbox, and each call's RAM-backed /tmp multiplied
with concurrent calls. A memory cgroup caps what the command's processes and the tmpfs
pages they write may hold (RSS, page cache and shmem are all charged to it), and the
kernel's OOM killer then ends the command alone, not the server. Where no memory cgroup
can be made (unprivileged, no delegation) the sandbox falls back to RLIMIT_AS, which caps
each process's address space instead (see `run_sandboxed`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from app.tools.sandbox.cgroups import cgroup_candidates, read_text

log = logging.getLogger(__name__)

_PREFIX = "courier-mem-"
_names = itertools.count()


def _limit_file(version: int) -> str:
    return "memory.limit_in_bytes" if version == 1 else "memory.max"


def _usable(directory: Path, version: int) -> bool:
    if version == 2:
        try:
            if "memory" not in read_text(directory / "cgroup.subtree_control").split():
                (directory / "cgroup.subtree_control").write_text("+memory")
        except OSError:
            return False
    probe = directory / f"{_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        (probe / _limit_file(version)).write_text(str(64 * 1024 * 1024))
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


@functools.cache
def memory_cgroup_parent() -> tuple[Path, int] | None:
    """Where per-command memory cgroups can be made, and the cgroup version; or None."""
    try:
        candidates = list(cgroup_candidates("memory"))
    except OSError:
        return None
    for directory, version in candidates:
        if directory.is_dir() and _usable(directory, version):
            _sweep_stale(directory)
            return directory, version
    return None


def _sweep_stale(directory: Path) -> None:
    with contextlib.suppress(OSError):
        for child in directory.iterdir():
            if child.name.startswith(_PREFIX):
                pid = child.name.removeprefix(_PREFIX).split("-")[0]
                if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                    with contextlib.suppress(OSError):
                        child.rmdir()


@dataclass
class MemoryCgroup:
    """One command's memory cgroup: join it via `procs`, read `oom_killed` afterwards."""

    path: Path
    version: int
    limit: int

    @classmethod
    def create(cls, limit: int) -> MemoryCgroup | None:
        found = memory_cgroup_parent()
        if found is None:
            return None
        parent, version = found
        path = parent / f"{_PREFIX}{os.getpid()}-{next(_names)}"
        try:
            path.mkdir()
            (path / _limit_file(version)).write_text(str(limit))
            # Swap would let the command hold the limit in RAM and as much again on disk.
            swap = "memory.memsw.limit_in_bytes" if version == 1 else "memory.swap.max"
            with contextlib.suppress(OSError):
                (path / swap).write_text(str(limit) if version == 1 else "0")
        except OSError as exc:
            log.warning("could not create memory cgroup %s: %s", path, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path, version, limit)

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process here for reaching the limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            text = read_text(self.path / name)
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def destroy(self) -> None:
        """Remove the (by now empty: the pids cgroup killed everything) cgroup."""
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                # Tasks still exiting, or charged pages being reparented: retry shortly.
                with contextlib.suppress(OSError):
                    for pid in read_text(self.procs).split():
                        os.kill(int(pid), 9)
                time.sleep(0.01)
        log.warning("memory cgroup %s could not be removed", self.path)
