"""One server per data directory, and turn leases that name the process holding them.

Two `courier serve` processes on one data directory fought: the second cleared every live
lease at startup, so a turn ran concurrently on a session the first was serving, and the
first turn's finished call then failed with 409. An exclusive `flock` on a lock file in
the data directory makes the second process refuse to start, naming the holder's pid; the
kernel drops the lock when its holder dies, even by SIGKILL, so a crash never leaves the
directory locked. Leases carry their holder's instance id (pid plus the process start
time, so a recycled pid is not mistaken for the holder), and startup repair reclaims only
leases whose holder is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = "courier.lock"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
"""The data directory holds every transcript and key ledger: made with the umask's 0755 and
0644 they were readable by every local user."""


def make_data_dir(path: Path) -> None:
    """The data directory, owner-only when it is made here (an existing one is left as it
    is: `courier doctor` names a loose mode)."""
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=PRIVATE_DIR_MODE)


class DataDirBusy(Exception):
    """Another live process holds the data directory; its message is for the operator."""


@functools.cache
def instance_id() -> str:
    """This process's identity in lease tokens: `<pid>.<start time in clock ticks>`."""
    pid = os.getpid()
    return f"{pid}.{_start_time(pid) or 0}"


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 else None


def holder_alive(lease: str) -> bool:
    """Whether the process that took `lease` still runs (a lease without an id: no)."""
    holder, sep, _ = lease.partition("/")
    pid_text, dot, start_text = holder.partition(".")
    if not sep or not dot or not pid_text.isdigit() or not start_text.isdigit():
        return False
    started = _start_time(int(pid_text))
    return started is not None and started == int(start_text)


def new_lease_token() -> str:
    return f"{instance_id()}/{secrets.token_hex(12)}"


@dataclass
class DataDirLock:
    """The held lock; keep it for the life of the process (closing it releases the lock)."""

    path: Path
    fd: int

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        make_data_dir(data_dir)
        path = data_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").split("\n", 1)[0].strip()
            os.close(fd)
            raise DataDirBusy(
                f"data directory {data_dir} is in use by another courier process "
                f"(pid {holder or 'unknown'}); stop it or point COURIER_DATA_DIR elsewhere"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{instance_id()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
