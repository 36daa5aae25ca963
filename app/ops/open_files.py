"""Enough file descriptors for the streams the turn cap allows, asked for at startup.

Every open stream holds at least two descriptors (the client's socket and the upstream
connection), and the default turn cap allows 1,024 of them; a service manager's soft limit
is often 1,024 (systemd's default), so connections past about 500 streams would fail with
EMFILE. The soft limit may be raised up to the hard one without privilege: it is, at
startup, and never lowered. Sandboxed commands get 1,024 back (app/tools/sandbox/process.py):
a program using select() cannot watch a descriptor past FD_SETSIZE (1,024).
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

PER_TURN = 4
"""Descriptors budgeted per running turn: client socket, upstream socket, and room for a
tool's pipes and the store's files."""
BASE = 1024
"""The rest of the process: the database and its WAL, logs, listeners, the simulator-free
baseline of an idle server."""


def needed_for(max_concurrent_turns: int) -> int:
    return PER_TURN * max_concurrent_turns + BASE


def raise_open_files(needed: int) -> int:
    """Raise RLIMIT_NOFILE's soft limit to `needed` (at most the hard limit; never lower);
    returns the soft limit now in force. Past the hard limit, logs how many streams fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < needed:
        log.warning(
            "open files limited to %d (hard limit): about %d concurrent streams fit; "
            "raise LimitNOFILE (systemd) or `ulimit -Hn` for more",
            soft,
            max(0, (soft - BASE) // PER_TURN),
        )
    return soft
