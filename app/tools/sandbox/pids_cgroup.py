"""A pids cgroup per sandboxed command: a hard cap on its tasks, whoever runs it.

RLIMIT_NPROC never applies to uid 0, so a server run as root (CI does) caps a command's
processes here, when a pids cgroup can be made (root usually can). Beside the memory
cgroup (`memory_cgroup.py`); both find their place through `cgroups.py`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import time
from pathlib import Path

from app.tools.sandbox.cgroups import cgroup_candidates, read_text

log = logging.getLogger(__name__)

_cgroup_names = itertools.count()
_CGROUP_PREFIX = "courier-sandbox-"


def _usable_pids_parent(directory: Path, version: int) -> bool:
    if version == 2:
        try:
            enabled = read_text(directory / "cgroup.subtree_control").split()
            if "pids" not in enabled:
                # Refused (EBUSY) when processes live here, which cgroup v2 forbids beside
                # enabled controllers except at the root: then v2 is simply not usable.
                (directory / "cgroup.subtree_control").write_text("+pids")
        except OSError:
            return False
    probe = directory / f"{_CGROUP_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        (probe / "pids.max").write_text("1")
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _sweep_stale(directory: Path) -> None:
    """Remove cgroups left by a server that died mid-command (their names carry its pid)."""
    with contextlib.suppress(OSError):
        for child in directory.iterdir():
            name = child.name
            if not name.startswith(_CGROUP_PREFIX):
                continue
            pid = name.removeprefix(_CGROUP_PREFIX).split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    child.rmdir()


@functools.cache
def pids_cgroup_parent() -> Path | None:
    """Where per-command pids cgroups can be made, or None (not root, no delegation)."""
    try:
        candidates = list(cgroup_candidates("pids"))
    except OSError:
        return None
    for directory, version in candidates:
        if directory.is_dir() and _usable_pids_parent(directory, version):
            _sweep_stale(directory)
            return directory
    return None


class PidsCgroup:
    """A pids cgroup for one command: a hard cap on its tasks, whoever runs it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        parent = pids_cgroup_parent()
        if parent is None:
            return None
        path = parent / f"{_CGROUP_PREFIX}{os.getpid()}-{next(_cgroup_names)}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(limit))
        except OSError as exc:
            log.warning("could not create pids cgroup %s: %s", path, exc)
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def destroy(self) -> None:
        """Kill whatever is left in it and remove it (blocking: run in a thread)."""
        kill_file = self.path / "cgroup.kill"  # v2, Linux 5.14+: atomic against forks
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1")
        for _ in range(200):
            try:
                pids = [int(p) for p in read_text(self.procs).split()]
            except OSError:
                return
            if not pids:
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    pass  # the last tasks are still being reaped
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        log.warning("pids cgroup %s could not be removed", self.path)
