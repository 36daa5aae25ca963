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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PREFIX = "courier-mem-"
_names = itertools.count()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _own_paths() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                found[controller] = parts[2]
    return found


def _candidates() -> Iterator[tuple[Path, int]]:
    """(our directory, cgroup version) in each mounted hierarchy offering `memory`."""
    ours = _own_paths()
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, superopts = tail[0], tail[2].split(",")
        if fstype == "cgroup" and "memory" in superopts:
            key, version = "memory", 1
        elif fstype == "cgroup2":
            key, version = "", 2
        else:
            continue
        if key not in ours:
            continue
        rel = os.path.relpath(ours[key], fields[3])
        if rel.startswith(".."):
            continue
        yield Path(fields[4].replace("\\040", " ")) / rel, version


def _limit_file(version: int) -> str:
    return "memory.limit_in_bytes" if version == 1 else "memory.max"


def _usable(directory: Path, version: int) -> bool:
    if version == 2:
        try:
            if "memory" not in _read(directory / "cgroup.subtree_control").split():
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
        candidates = list(_candidates())
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
            text = _read(self.path / name)
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
                    for pid in _read(self.procs).split():
                        os.kill(int(pid), 9)
                time.sleep(0.01)
        log.warning("memory cgroup %s could not be removed", self.path)
