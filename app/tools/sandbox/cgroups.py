"""Where this process sits in the cgroup hierarchies, for the tools that make child cgroups
(the sandbox's process limit, a call's memory limit).

One reading of /proc/self/cgroup and /proc/self/mountinfo serves both: two copies of the
parse would drift on the subtle part, a mount that shows only a subtree of the hierarchy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def own_cgroups() -> dict[str, str]:
    """Controller ("" for cgroup v2) -> this process's cgroup path in that hierarchy."""
    found: dict[str, str] = {}
    for line in read_text(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                found[controller] = parts[2]
    return found


def cgroup_candidates(controller: str) -> Iterator[tuple[Path, int]]:
    """(our cgroup directory, version) in every mounted hierarchy offering `controller`."""
    ours = own_cgroups()
    for line in read_text(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        fstype, superopts = tail[0], tail[2].split(",")
        if fstype == "cgroup" and controller in superopts:
            key, version = controller, 1
        elif fstype == "cgroup2":
            key, version = "", 2
        else:
            continue
        if key not in ours:
            continue
        # The mount may show a subtree (a container's cgroup namespace or bind): our path
        # is relative to the mount's root, not to the hierarchy's.
        rel = os.path.relpath(ours[key], fields[3])
        if rel.startswith(".."):
            continue
        yield Path(fields[4].replace("\\040", " ")) / rel, version
