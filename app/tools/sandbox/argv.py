"""The bwrap command line: the sandbox's policy (`policy.py`) said in bwrap's options.

Also the file descriptors the command line names (the synthesised /etc files and the
seccomp filter, passed as pipes) and which of bwrap's options this host's bwrap knows:
an option an old bwrap lacks is left out rather than failing every call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from app.security.egress import SOCKET_DIR_IN_SANDBOX, proxy_env
from app.tools.sandbox.policy import (
    ETC_ALLOWLIST,
    ETC_GLOBS,
    FULL_PROFILE,
    NETWORK_ETC,
    PROC_COVER,
    PROC_MASK,
    SANDBOX_GID,
    SANDBOX_HOSTNAME,
    SANDBOX_PATH,
    SANDBOX_UID,
    SANDBOX_WORKSPACE,
    SYSTEM_DIRS,
    TMP_SIZE_BYTES,
    SandboxError,
    SandboxProfile,
    sandbox_env,
    synthetic_etc,
)
from app.tools.sandbox.seccomp import seccomp_program

HOST_ENV = {"PATH": SANDBOX_PATH}
"""The whole environment of bwrap itself: it needs nothing else, and then even a bwrap bug
cannot hand the sandbox a secret from the server's environment."""


def find_bwrap() -> str | None:
    # The server's PATH first (an operator may ship a newer bwrap), then the system dirs,
    # which a minimal service PATH can lack.
    return shutil.which("bwrap") or shutil.which("bwrap", path=SANDBOX_PATH)


@functools.cache
def bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bwrap knows: --disable-userns and --size are 0.8+, Ubuntu 22.04
    ships 0.6, and an unknown option would make every call fail instead of degrading."""
    try:
        proc = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, env=HOST_ENV
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    words = (proc.stdout + proc.stderr).split()
    return frozenset(word for word in words if word.startswith("--"))


def bwrap_argv(
    bwrap: str,
    workspace: Path,
    command: Sequence[str],
    *,
    network: bool,
    data_fds: Mapping[str, int],
    seccomp_fd: int | None = None,
    profile: SandboxProfile = FULL_PROFILE,
    egress_dir: Path | None = None,
) -> list[str]:
    """The bwrap command line running `command` with `workspace` at /workspace.

    `data_fds` maps a sandbox path to a readable fd whose contents become that (read-only)
    file, `seccomp_fd` carries a compiled filter (built for the same `profile`); the caller
    must pass them to the child.
    """
    options = bwrap_options(bwrap)
    # With network the sandbox still keeps its own (empty) network namespace: its only way
    # out is the egress proxy's socket in `egress_dir` (app/security/egress.py). Sharing
    # the host's namespace would hand it the host's loopback and LAN unguarded.
    if network and egress_dir is None:
        raise SandboxError("network access needs the egress proxy; refusing a shared network")
    argv = [bwrap, *_isolation(options, profile, seccomp_fd)]
    argv += _host_files(options, network=network, data_fds=data_fds)
    argv += _proc(profile)
    argv += ["--dev", "/dev"]
    if "--size" in options:
        argv += ["--size", str(TMP_SIZE_BYTES)]
    argv += ["--tmpfs", "/tmp"]
    argv += ["--bind", str(workspace), SANDBOX_WORKSPACE]
    if network and egress_dir is not None:
        argv += ["--ro-bind", str(egress_dir), SOCKET_DIR_IN_SANDBOX]
    # The root is a tmpfs bwrap built; left writable, `echo x > /etc/evil` would "succeed"
    # (harmlessly, but it reads like an escape and lets a command fake system files).
    argv += ["--remount-ro", "/", "--chdir", SANDBOX_WORKSPACE, "--clearenv"]
    env = {**sandbox_env(), **(proxy_env() if network else {})}
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


def _isolation(
    options: frozenset[str], profile: SandboxProfile, seccomp_fd: int | None
) -> list[str]:
    """Namespaces, capabilities, the sandbox user, the session and the seccomp filter."""
    # --unshare-user explicitly, not the "-try" that --unshare-all implies: without a user
    # namespace a root caller's sandbox would run as real root with all its capabilities,
    # so fail instead.
    argv = ["--unshare-all", "--unshare-user"]
    if profile.disable_userns and "--disable-userns" in options:
        # A nested user namespace grants capabilities again (inside it): kernel attack
        # surface the command has no use for.
        argv.append("--disable-userns")
    if "--cap-drop" in options:
        # Empties the bounding set too (a root caller's is otherwise full): no capability
        # can come back even through a path that escaped nosuid.
        argv += ["--cap-drop", "ALL"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    if profile.hostname:
        argv += ["--hostname", SANDBOX_HOSTNAME]
    argv += ["--die-with-parent", "--new-session"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv


def _host_files(
    options: frozenset[str], *, network: bool, data_fds: Mapping[str, int]
) -> list[str]:
    """/usr and the system dirs read-only, the allowlisted /etc, the synthesised files."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]

    argv += ["--dir", "/etc"]
    etc = [*ETC_ALLOWLIST, *(NETWORK_ETC if network else ())]
    etc += sorted(str(p) for pattern in ETC_GLOBS for p in Path("/etc").glob(pattern))
    for path in etc:
        argv += ["--ro-bind-try", path, path]
    for dest, fd in data_fds.items():
        if "--perms" in options:  # else 0600: fine for the sandbox user, odd to look at
            argv += ["--perms", "0644"]
        argv += ["--ro-bind-data", str(fd), dest]
    argv += ["--symlink", "../proc/self/mounts", "/etc/mtab"]
    return argv


def _proc(profile: SandboxProfile) -> list[str]:
    if not profile.fresh_proc:
        # An empty directory, not a bind of the container's /proc: that one would show the
        # server's processes, and /proc/<pid>/environ of a same-uid process is readable.
        return ["--dir", "/proc"]
    argv = ["--proc", "/proc"]
    for name in PROC_COVER:
        # The source is the host's /proc: same kernel, so the same entries, and reads
        # through it resolve per-namespace files against the reader, i.e. the sandbox.
        argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASK:
        argv += ["--ro-bind-try", "/dev/null", f"/proc/{name}"]
    return argv


@contextlib.contextmanager
def _data_pipes(files: Mapping[str, bytes]) -> Iterator[dict[str, int]]:
    """Readable fds carrying each file's bytes, closed on exit.

    Pipes rather than temp files: a temp dir would outlive a crash, and a cleaner sweeping
    /tmp under a long-running server would make every later bind fail.
    """
    opened: list[int] = []
    fds: dict[str, int] = {}
    try:
        for dest, data in files.items():
            read_end, write_end = os.pipe()
            opened.append(read_end)
            fds[dest] = read_end
            try:
                os.write(write_end, data)  # far below the pipe buffer: cannot block
            finally:
                os.close(write_end)
        yield fds
    finally:
        for fd in opened:
            os.close(fd)


_SECCOMP_KEY = "\x00seccomp"


@contextlib.contextmanager
def sandbox_inputs(
    profile: SandboxProfile = FULL_PROFILE,
) -> Iterator[tuple[dict[str, int], int | None]]:
    """(fds for the synthesised /etc files, fd of the seccomp filter or None)."""
    blobs = synthetic_etc()
    program = seccomp_program(block_userns=not profile.disable_userns)
    if program is not None:
        blobs[_SECCOMP_KEY] = program
    with _data_pipes(blobs) as fds:
        seccomp = fds.pop(_SECCOMP_KEY, None)
        yield fds, seccomp


def fd_list(fds: Mapping[str, int], seccomp: int | None) -> tuple[int, ...]:
    """The fds `bwrap_argv` named, to pass to the child."""
    return (*fds.values(), *(() if seccomp is None else (seccomp,)))
