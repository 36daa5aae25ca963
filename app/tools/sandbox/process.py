"""Run one shell command under bubblewrap (`bwrap`), or, when a profile asks, on the host.

The sandbox is what keeps an exposed endpoint from being remote code execution on the host.
Each call gets:

- the workspace bound read-write at /workspace (also the cwd and HOME); nothing else the
  command can write survives the call;
- /usr and the /bin, /lib* links read-only, and an *allowlisted* handful of /etc files. A
  whole-/etc bind with /etc/shadow masked would still hand out whatever else the host keeps
  there: this very machine has /etc/pip.conf and /etc/npmrc, where registry tokens live.
  passwd, group and hosts are synthesised, so host account names do not leak either;
- a fresh /tmp (size-capped tmpfs), a fresh /proc for a new PID namespace, a minimal /dev;
- every namespace unshared (no network unless the profile allows it), no capabilities, no
  nested user namespaces, a new session (no TIOCSTI into a terminal), death with its
  parent, and a seccomp filter that refuses setuid/setgid modes (see below);
- a scrubbed environment (PATH, HOME, LANG, TERM=dumb, ...): never COURIER_* or provider keys;
- a process limit, a timeout that kills everything the command started, and capped output.

Running as root (CI does) needs two extra measures, because bwrap maps the sandbox user to
the caller's uid and the kernel then treats sandboxed processes as host root for permission
checks (though they hold no capabilities):

- /proc/sys and friends are re-bound read-only. bwrap skips covering /proc/sys when the
  directory itself looks read-only, but the files in it are writable by uid 0: a sandboxed
  `echo '|/workspace/x' > /proc/sys/kernel/core_pattern` would run code as host root.
- RLIMIT_NPROC never applies to uid 0, so the process limit is a pids cgroup when one can be
  created (root usually can). For other callers RLIMIT_NPROC works and is applied too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import platform
import shlex
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.security.egress import (
    BRIDGE_SOURCE,
    PROXY_PORT,
    SOCKET_DIR_IN_SANDBOX,
    SOCKET_NAME,
    EgressProxy,
    bridge_python,
    proxy_env,
)
from app.tools.sandbox.cgroups import cgroup_candidates, read_text
from app.tools.sandbox.memory_cgroup import MemoryCgroup

log = logging.getLogger(__name__)

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_USER = "courier"
SANDBOX_HOSTNAME = "courier-sandbox"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MAX_PROCESSES = 512
"""Tasks (processes and threads) one command may have at once. Threads count too, so this
leaves room for a parallel build or a JVM; a fork bomb stops here."""
MAX_OUTPUT_BYTES = 1_000_000
"""Output kept per call (head and tail halves). Well above the spill threshold on purpose:
the spill layer relocates a large result to a file without losing any of it, so capping
here at the spill size would throw away exactly what spilling exists to keep. This cap only
bounds memory against a command that prints forever."""
TMP_SIZE_BYTES = 512 * 1024 * 1024
CPU_GRACE_S = 5
"""Extra CPU seconds between RLIMIT_CPU's soft limit (SIGXCPU) and its hard one (SIGKILL)."""
KILL_GRACE_S = 2.0
"""After the command ends, how long to wait for its output pipe to close."""
PROBE_RETRY_S = 60.0

_HOST_ENV = {"PATH": SANDBOX_PATH}
"""The whole environment of bwrap itself: it needs nothing else, and then even a bwrap bug
cannot hand the sandbox a secret from the server's environment."""

_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_ALLOWLIST = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",  # Debian's awk, editor, java, ... are symlinks through here
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/os-release",
    "/etc/debian_version",
    "/etc/lsb-release",
    "/etc/mime.types",
)
"""Read-only /etc entries a shell and common runtimes need (missing ones are skipped).
Deliberately absent: shadow and gshadow, ssl/private, and tool configs that carry
credentials (pip.conf, npmrc, gitconfig, maven settings)."""
_ETC_GLOBS = ("python3*", "java-*")
"""Runtime config dirs: Debian's python links sitecustomize.py here and its JVM refuses to
start without its java.security file."""
_NETWORK_ETC = ("/etc/resolv.conf",)
_PROC_COVER = ("sys", "sysrq-trigger", "irq", "bus", "acpi", "fs", "scsi")
"""Re-bound read-only over the sandbox's own /proc: files here are guarded only by being
owned by uid 0, which a sandbox run by root passes (see the module docstring)."""


_PROC_MASK = ("keys", "key-users")
"""Emptied in the sandbox: they list the host keyring's entries (names, owners, quotas).
The keyring syscalls themselves are refused by the seccomp filter."""


class SandboxError(Exception):
    """The sandbox could not be set up (bwrap missing or failing); the command did not run."""


@dataclass(frozen=True, slots=True)
class CommandResult:
    output: str
    """stdout and stderr merged in the order written, head and tail kept past the cap."""
    exit_code: int | None
    """The command's exit status; negative is a signal (local backend); None on timeout."""
    timed_out: bool
    dropped_bytes: int = 0
    limit_hit: str | None = None
    """Which per-call limit ended the command ("memory"), when we can tell."""


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    """Per-call limits beyond the process count: memory, CPU seconds, largest file."""

    memory_bytes: int
    cpu_seconds: int
    file_size_bytes: int


@dataclass(frozen=True, slots=True)
class SandboxProfile:
    """Which isolation steps bwrap performs itself.

    Everywhere but inside a container all of them (FULL). A container's default seccomp
    profile refuses sethostname and its masked /proc refuses a fresh proc mount, yet the
    container already gives the command its own hostname and hides the host's processes;
    so inside one, and only there, a step the container refuses may be dropped
    (`CONTAINER_FALLBACKS`), each named in the startup log with the option that restores it.
    """

    hostname: bool = True
    """A new UTS namespace with its own hostname (`--hostname`)."""
    fresh_proc: bool = True
    """A /proc for the sandbox's PID namespace; without it the sandbox has no /proc at all,
    never the container's (which would show the server's processes and environment)."""
    disable_userns: bool = True
    """bwrap's `--disable-userns`; when it cannot run (it writes /proc/sys, read-only in a
    container), the seccomp filter refuses new user namespaces instead."""

    def missing(self) -> list[str]:
        """What this profile gives up, and which container option restores it."""
        lost = []
        if not self.hostname:
            lost.append(
                "sandbox keeps the container's hostname (sethostname is refused by the "
                "container's seccomp profile; `--security-opt seccomp=unconfined` restores it)"
            )
        if not self.fresh_proc:
            lost.append(
                "no /proc inside the sandbox, so ps and /proc/self do not work (the "
                "container masks /proc; podman `--security-opt unmask=ALL` or docker "
                "`--security-opt systempaths=unconfined` restores it)"
            )
        return lost


FULL_PROFILE = SandboxProfile()
CONTAINER_FALLBACKS = (
    SandboxProfile(hostname=False),
    SandboxProfile(hostname=False, disable_userns=False),
    SandboxProfile(hostname=False, fresh_proc=False, disable_userns=False),
)
"""Tried in order after FULL_PROFILE fails inside a container; the first that starts wins."""


# -- the bwrap command line ------------------------------------------------------------------


def sandbox_env(home: str = SANDBOX_WORKSPACE) -> dict[str, str]:
    """The only variables a command sees: built from nothing, never copied from ours."""
    return {
        "PATH": SANDBOX_PATH,
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
        "USER": SANDBOX_USER,
        "LOGNAME": SANDBOX_USER,
        "SHELL": shell(),
    }


@functools.cache
def shell() -> str:
    """bash when the host has it: models write bash (`[[`, pipefail, brace expansion)."""
    return "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"


def synthetic_etc() -> dict[str, bytes]:
    """Files generated per run rather than bound from the host."""
    user = f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}::{SANDBOX_WORKSPACE}:{shell()}"
    return {
        "/etc/passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{user}\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ).encode(),
        "/etc/group": (f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n").encode(),
        "/etc/hosts": (
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
            f"127.0.1.1\t{SANDBOX_HOSTNAME}\n"
        ).encode(),
    }


@functools.cache
def _bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bwrap knows: --disable-userns and --size are 0.8+, Ubuntu 22.04
    ships 0.6, and an unknown option would make every call fail instead of degrading."""
    try:
        proc = subprocess.run(
            [bwrap, "--help"], capture_output=True, text=True, timeout=10, env=_HOST_ENV
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
    options = _bwrap_options(bwrap)
    # --unshare-user explicitly, not the "-try" that --unshare-all implies: without a user
    # namespace a root caller's sandbox would run as real root with all its capabilities,
    # so fail instead.
    argv = [bwrap, "--unshare-all", "--unshare-user"]
    # With network the sandbox still keeps its own (empty) network namespace: its only way
    # out is the egress proxy's socket in `egress_dir` (app/security/egress.py). Sharing
    # the host's namespace would hand it the host's loopback and LAN unguarded.
    if network and egress_dir is None:
        raise SandboxError("network access needs the egress proxy; refusing a shared network")
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

    argv += ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_DIRS:
        host = Path("/") / name
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            argv += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{name}"]

    argv += ["--dir", "/etc"]
    etc = [*_ETC_ALLOWLIST, *(_NETWORK_ETC if network else ())]
    etc += sorted(str(p) for pattern in _ETC_GLOBS for p in Path("/etc").glob(pattern))
    for path in etc:
        argv += ["--ro-bind-try", path, path]
    for dest, fd in data_fds.items():
        if "--perms" in options:  # else 0600: fine for the sandbox user, odd to look at
            argv += ["--perms", "0644"]
        argv += ["--ro-bind-data", str(fd), dest]
    argv += ["--symlink", "../proc/self/mounts", "/etc/mtab"]

    if profile.fresh_proc:
        argv += ["--proc", "/proc"]
        for name in _PROC_COVER:
            # The source is the host's /proc: same kernel, so the same entries, and reads
            # through it resolve per-namespace files against the reader, i.e. the sandbox.
            argv += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
        for name in _PROC_MASK:
            argv += ["--ro-bind-try", "/dev/null", f"/proc/{name}"]
    else:
        # An empty directory, not a bind of the container's /proc: that one would show the
        # server's processes, and /proc/<pid>/environ of a same-uid process is readable.
        argv += ["--dir", "/proc"]
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
def _sandbox_inputs(
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


# -- seccomp: no setuid files ----------------------------------------------------------------
#
# Files the sandbox creates in the workspace belong, on the host, to the uid running Courier.
# If the command could set their setuid bit, `cp /bin/sh x; chmod u+s x` would leave a
# setuid-root shell (or setuid-courier, with the server's keys in reach) in the workspace for
# any local user who can reach the data directory. Ownership is all chmod checks, so only a
# syscall filter stops it: the mode-taking calls fail with EPERM when the mode carries
# S_ISUID or S_ISGID. openat2 and io_uring are refused with ENOSYS because their modes sit
# where a filter cannot read them (libc falls back to openat). The keyring calls (add_key,
# request_key, keyctl) are refused too: the sandbox shares the host's kernel keyrings, so a
# command could otherwise read or join the caller's session keyring.

_S_ISUID_ISGID = 0o6000
_EPERM, _ENOSYS = 1, 38
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_X32_BIT = 0x40000000

_CLONE_NEWUSER = 0x10000000

_SECCOMP_ARCHES: dict[str, tuple[int, dict[int, int], tuple[int, ...], dict[int, int]]] = {
    # machine: (AUDIT_ARCH_*, {syscall: index of its mode argument}, refused syscalls,
    #           {syscall: index of its clone-flags argument} for the user-namespace block)
    "x86_64": (
        0xC000003E,
        # open, creat, chmod, fchmod, mknod, openat, mknodat, fchmodat, fchmodat2
        {2: 2, 85: 1, 90: 1, 91: 1, 133: 1, 257: 3, 259: 2, 268: 2, 452: 2},
        # io_uring_setup, _enter, _register; openat2; add_key, request_key, keyctl
        (425, 426, 427, 437, 248, 249, 250),
        {56: 0, 272: 0},  # clone, unshare
    ),
    "aarch64": (
        0xC00000B7,
        {56: 3, 33: 2, 52: 1, 53: 2, 452: 2},  # openat, mknodat, fchmod, fchmodat, fchmodat2
        (425, 426, 427, 437, 217, 218, 219),
        {220: 0, 97: 0},  # clone, unshare
    ),
}
_CLONE3 = 435
"""Same number on both: its flags sit in a struct a filter cannot read, so it is refused
with ENOSYS when user namespaces are blocked (libc then falls back to clone)."""
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


@functools.cache
def seccomp_program(*, block_userns: bool = False) -> bytes | None:
    """The compiled classic-BPF filter for this machine, or None where we have no table.

    `block_userns` also refuses new user namespaces (EPERM), for a profile that cannot use
    bwrap's `--disable-userns`: a nested user namespace hands the command every capability
    inside it, kernel attack surface it has no use for.
    """
    machine = platform.machine().lower()
    spec = _SECCOMP_ARCHES.get(_MACHINE_ALIASES.get(machine, machine))
    if spec is None:
        log.warning("no seccomp table for %s: sandboxed commands can create setuid files", machine)
        return None
    audit_arch, mode_arg, refused, clone_arg = spec
    # syscall -> (argument index, forbidden bits)
    checks = {nr: (index, _S_ISUID_ISGID) for nr, index in mode_arg.items()}
    if block_userns:
        refused = (*refused, _CLONE3)
        checks.update({nr: (index, _CLONE_NEWUSER) for nr, index in clone_arg.items()})
    # (code, jump-if-true, jump-if-false, k); jumps are label names or 0 (fall through).
    insns: list[tuple[int, str | int, str | int, int]] = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        # Another ABI (32-bit calls from a 64-bit process) would use other numbers.
        (_JEQ, 0, "enosys", audit_arch),
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
    ]
    if audit_arch == 0xC000003E:
        insns.append((_JGE, "enosys", 0, _X32_BIT))  # the x32 ABI, same arch tag
    insns += [(_JEQ, "enosys", 0, nr) for nr in refused]
    insns += [(_JEQ, f"arg{index}:{bits}", 0, nr) for nr, (index, bits) in checks.items()]
    insns.append((_RET, 0, 0, _RET_ALLOW))
    labels: dict[str, int] = {}
    for index, bits in sorted(set(checks.values())):
        labels[f"arg{index}:{bits}"] = len(insns)
        # Low 32 bits of args[index] (little-endian): mode_t is 32 bits, and so are the
        # clone flags that matter here.
        insns.append((_LD_ABS_W, 0, 0, 16 + 8 * index))
        insns.append((_JSET, "eperm", 0, bits))
        insns.append((_RET, 0, 0, _RET_ALLOW))
    labels["eperm"] = len(insns)
    insns.append((_RET, 0, 0, _RET_ERRNO | _EPERM))
    labels["enosys"] = len(insns)
    insns.append((_RET, 0, 0, _RET_ERRNO | _ENOSYS))

    def offset(at: int, target: str | int) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(i, jt), offset(i, jf), k)
        for i, (code, jt, jf, k) in enumerate(insns)
    )


def _fd_list(fds: Mapping[str, int], seccomp: int | None) -> tuple[int, ...]:
    return (*fds.values(), *(() if seccomp is None else (seccomp,)))


# -- availability ----------------------------------------------------------------------------


@dataclass
class _ProbeState:
    profile: SandboxProfile | None = None
    reason: str = "not probed yet"
    at: float = float("-inf")


_probe = _ProbeState()


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    """What the last probe found: the profile in use (None: the terminal is off) and why."""

    profile: SandboxProfile | None
    reason: str
    """Why the terminal is off, or "" when it is on."""

    @property
    def missing(self) -> list[str]:
        return self.profile.missing() if self.profile is not None else []


def bwrap_available() -> bool:
    """bwrap is installed and a sandbox starts.

    Presence alone is not enough: Ubuntu 24.04's AppArmor, a container without user
    namespaces or a too-old bwrap all leave the binary in place and fail every call. A
    success is cached for good; a failure is re-probed after a minute, so installing bwrap
    under a running server is picked up.
    """
    return sandbox_status().profile is not None


def sandbox_status() -> SandboxStatus:
    """Probe (at most once a minute until one succeeds) and report the sandbox in use."""
    now = time.monotonic()
    if _probe.profile is None and now - _probe.at >= PROBE_RETRY_S:
        _probe.profile, _probe.reason = _choose_profile()
        _probe.at = now
    return SandboxStatus(_probe.profile, "" if _probe.profile else _probe.reason)


def in_container() -> bool:
    """Running inside a podman or Docker container: the marker file each engine creates, or
    podman's `container` variable (its marker file is hidden under `--read-only`'s /run).

    The marker decides whether a weaker profile may be tried: on a bare host a failing
    sethostname or proc mount is a broken setup to fix, not something already isolated.
    """
    if Path("/run/.containerenv").exists() or Path("/.dockerenv").exists():
        return True
    return bool(os.environ.get("container"))  # noqa: SIM112  (lower case is the convention)


def _choose_profile() -> tuple[SandboxProfile | None, str]:
    bwrap = _find_bwrap()
    if bwrap is None:
        reason = "bwrap (bubblewrap) is not installed"
        log.warning("%s: the sandboxed terminal is off", reason)
        return None, reason
    first_error = _try_profile(bwrap, FULL_PROFILE)
    if first_error is None:
        return FULL_PROFILE, ""
    if in_container():
        for profile in CONTAINER_FALLBACKS:
            if _try_profile(bwrap, profile) is None:
                log.warning(
                    "terminal sandbox: the full profile failed in this container (%s); using "
                    "a reduced one: %s",
                    first_error,
                    "; ".join(profile.missing()),
                )
                return profile, ""
        first_error += (
            "; inside a container bwrap needs user namespaces and mount(2): run with "
            "`--security-opt seccomp=unconfined` (Docker also `--security-opt "
            "apparmor=unconfined` on AppArmor hosts); podman's defaults suffice"
        )
    log.warning("bwrap cannot start a sandbox, the terminal tool is off: %s", first_error)
    return None, first_error


def _try_profile(bwrap: str, profile: SandboxProfile) -> str | None:
    """Run `true` in a sandbox built with `profile`: None on success, else what failed."""
    with tempfile.TemporaryDirectory() as ws, _sandbox_inputs(profile) as (fds, seccomp):
        argv = bwrap_argv(
            bwrap,
            Path(ws),
            ["true"],
            network=False,
            data_fds=fds,
            seccomp_fd=seccomp,
            profile=profile,
        )
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
                env=_HOST_ENV,
                pass_fds=_fd_list(fds, seccomp),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap failed to run: {exc}"
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip() or "no message"
        return f"bwrap exited {proc.returncode}: {detail}"
    return None


def _find_bwrap() -> str | None:
    # The server's PATH first (an operator may ship a newer bwrap), then the system dirs,
    # which a minimal service PATH can lack.
    return shutil.which("bwrap") or shutil.which("bwrap", path=SANDBOX_PATH)


# -- process limit ---------------------------------------------------------------------------


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


def process_limit_enforced() -> bool:
    """Whether a sandboxed fork bomb hits a limit: a pids cgroup, or RLIMIT_NPROC (not root)."""
    return os.geteuid() != 0 or pids_cgroup_parent() is not None


class _PidsCgroup:
    """A pids cgroup for one command: a hard cap on its tasks, whoever runs it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, limit: int) -> _PidsCgroup | None:
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


def _count_own_tasks() -> int:
    """Tasks (threads included) of our real uid, as RLIMIT_NPROC counts them."""
    uid, total = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = read_text(Path(entry.path) / "status")
        except OSError:
            continue  # exited meanwhile
        fields = {}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.split()
        if fields.get("Uid", ["-1"])[0] == str(uid):
            total += int(fields.get("Threads", ["1"])[0])
    return total


def _nproc_rlimit(limit: int) -> int:
    # RLIMIT_NPROC counts every task of the uid host-wide, not just the command's: a bare
    # `limit` would leave no room at all once the server and its threads pass it.
    return limit if os.geteuid() == 0 else _count_own_tasks() + limit


# -- running ---------------------------------------------------------------------------------


class _Capture:
    """Keeps the first and last `limit / 2` bytes of a stream, counting what falls between."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        # Whole chunks in a deque: trimming one bytearray from the front would copy the
        # whole tail per chunk, quadratic for a command that prints gigabytes.
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail and self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail.popleft())

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.feed(chunk)

    def result(self) -> tuple[str, int]:
        tail = b"".join(self.tail)[-self.tail_limit :] if self.tail_limit else b""
        dropped = self.total - len(self.head) - len(tail)
        text = self.head.decode(errors="replace")
        if dropped:
            text += f"\n[... {dropped:,} bytes of output omitted ...]\n"
        return text + tail.decode(errors="replace"), dropped


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed process's exit status, shielded from a cancellation in progress."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), KILL_GRACE_S)


async def _execute(
    argv: Sequence[str],
    *,
    timeout_s: float,
    max_output_bytes: int,
    env: Mapping[str, str],
    cwd: Path | None = None,
    pass_fds: Iterable[int] = (),
) -> CommandResult:
    loop = asyncio.get_running_loop()
    # Our own pipe rather than stdout=PIPE: on Python 3.11, Process.wait() does not return
    # until every pipe closes, so `sleep 100 &` (which inherits stdout) would make a finished
    # command look like it ran into the timeout.
    read_fd, write_fd = os.pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            cwd=cwd,
            env=dict(env),
            # Its own process group and session: the kill below reaches every process the
            # command forked without it, and none of them reaches the server's terminal.
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        os.close(read_fd)
        raise SandboxError(f"could not start {argv[0]}: {exc}") from exc
    finally:
        os.close(write_fd)
    stream = asyncio.StreamReader()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_fd, "rb", buffering=0)
        )
    except BaseException:
        _kill_group(proc.pid)
        raise
    capture = _Capture(max_output_bytes)
    reader = asyncio.create_task(capture.drain(stream))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
        finally:
            # On timeout, on cancellation (the client went away, an interrupt) and after a
            # normal exit alike: background jobs would otherwise run on unattended, holding
            # the output pipe. (Under bwrap they already died with the PID namespace.)
            _kill_group(proc.pid)
            # Reaped before a cancellation goes on up: the turn that ends next must not
            # leave a killed command behind as a zombie its caller believes gone.
            await _reap(proc)
        # A daemonised grandchild (local backend, its own session) may still hold the
        # pipe; returning what we have beats hanging the turn on it.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), KILL_GRACE_S)
    finally:
        reader.cancel()
        transport.close()
    output, dropped = capture.result()
    return CommandResult(
        output=output,
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        dropped_bytes=dropped,
    )


async def run_sandboxed(
    command: str,
    workspace: Path,
    *,
    timeout_s: float,
    network: bool = False,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    max_processes: int = MAX_PROCESSES,
    limits: ResourceLimits | None = None,
    egress_allow: Sequence[str] = (),
    profile: SandboxProfile | None = None,
) -> CommandResult:
    """Run `command` with the shell under bwrap, `workspace` at /workspace.

    With `network`, outbound traffic goes only through an egress proxy applying the SSRF
    rules with `egress_allow` as the allow-list (see app/security/egress.py). `profile`
    None uses the one the probe chose (`sandbox_status`).
    """
    if not network:
        return await _run_sandboxed(
            command,
            workspace,
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            max_processes=max_processes,
            limits=limits,
            egress=None,
            profile=profile,
        )
    python = bridge_python()
    if python is None:
        raise SandboxError(
            "network access from the sandbox needs python3 on the host (for the egress bridge)"
        )
    async with EgressProxy(egress_allow) as proxy:
        sock = f"{SOCKET_DIR_IN_SANDBOX}/{SOCKET_NAME}"
        # The bridge binds its port and forks, so the command starts with it listening.
        wrapped = (
            f"{shlex.quote(python)} -c {shlex.quote(BRIDGE_SOURCE)} {PROXY_PORT} "
            f"{shlex.quote(sock)} || {{ echo 'courier: egress bridge failed' >&2; exit 126; }}\n"
            f"exec {shlex.quote(shell())} -c {shlex.quote(command)}"
        )
        return await _run_sandboxed(
            wrapped,
            workspace,
            timeout_s=timeout_s,
            max_output_bytes=max_output_bytes,
            max_processes=max_processes,
            limits=limits,
            egress=proxy.directory,
            profile=profile,
        )


async def _run_sandboxed(
    command: str,
    workspace: Path,
    *,
    timeout_s: float,
    max_output_bytes: int,
    max_processes: int,
    limits: ResourceLimits | None,
    egress: Path | None,
    profile: SandboxProfile | None,
) -> CommandResult:
    bwrap = _find_bwrap()
    if bwrap is None:
        raise SandboxError("bwrap (bubblewrap) is not installed")
    if profile is None:
        status = await asyncio.to_thread(sandbox_status)
        if status.profile is None:
            raise SandboxError(f"the command sandbox cannot start: {status.reason}")
        profile = status.profile
    root = workspace.resolve()
    root.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(_bwrap_options, bwrap)  # cached `bwrap --help`, off the loop
    rlimit = await asyncio.to_thread(_nproc_rlimit, max_processes)
    cgroup = await asyncio.to_thread(_PidsCgroup.create, max_processes)
    memory = (
        await asyncio.to_thread(MemoryCgroup.create, limits.memory_bytes)
        if limits is not None
        else None
    )
    try:
        prefix: list[str] = []
        joins = [str(c.procs) for c in (cgroup, memory) if c is not None]
        if joins:
            # Join the cgroups before bwrap forks anything: moving bwrap in afterwards would
            # leave its already-forked children outside the limits.
            script = (
                'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
            )
            prefix += ["/bin/sh", "-c", script, "courier-sandbox", *joins, "--"]
        prlimit = shutil.which("prlimit", path=SANDBOX_PATH)
        if prlimit is not None:
            # Set before bwrap starts, so a command cannot raise it back (that would need
            # CAP_SYS_RESOURCE on the host). No core dumps: they would land in the
            # workspace, or go to the host's crash handler running as root.
            prefix += [prlimit, f"--nproc={rlimit}:{rlimit}", "--core=0:0"]
            if limits is not None:
                prefix += [
                    # SIGXCPU at the soft limit (the shell names it), SIGKILL a little
                    # later for a process that ignores it.
                    f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + CPU_GRACE_S}",
                    f"--fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
                ]
                if memory is None:
                    # No memory cgroup here: cap each process's address space instead.
                    prefix += [f"--as={limits.memory_bytes}:{limits.memory_bytes}"]
            prefix.append("--")
        elif limits is not None:
            _warn_once("prlimit missing: no CPU, file-size or address-space limit per command")
        elif cgroup is None:
            _warn_once("neither prlimit nor a pids cgroup: sandbox process count unlimited")
        if cgroup is None and os.geteuid() == 0:
            _warn_once("running as root without a pids cgroup: no sandbox process limit")
        with _sandbox_inputs(profile) as (fds, seccomp):
            argv = bwrap_argv(
                bwrap,
                root,
                [shell(), "-c", command],
                network=egress is not None,
                data_fds=fds,
                seccomp_fd=seccomp,
                profile=profile,
                egress_dir=egress,
            )
            result = await _execute(
                [*prefix, *argv],
                timeout_s=timeout_s,
                max_output_bytes=max_output_bytes,
                env=_HOST_ENV,
                pass_fds=_fd_list(fds, seccomp),
            )
        if memory is not None and await asyncio.to_thread(memory.oom_killed):
            return dataclasses.replace(result, limit_hit="memory")
        return result
    finally:
        if cgroup is not None:
            # Shielded: a cancelled turn must still reap the cgroup, or it leaks.
            await asyncio.shield(asyncio.to_thread(cgroup.destroy))
        if memory is not None:
            await asyncio.shield(asyncio.to_thread(memory.destroy))


async def run_local(
    command: str,
    workspace: Path,
    *,
    timeout_s: float,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
) -> CommandResult:
    """Run `command` on the host in `workspace`: no isolation beyond a scrubbed environment.

    Only for profiles that ask for it explicitly (and then an exposed bind is refused).
    """
    root = workspace.resolve()
    root.mkdir(parents=True, exist_ok=True)
    env = sandbox_env(home=str(root))
    for name in ("USER", "LOGNAME"):  # they would name a user that is not the host's
        env.pop(name)
    return await _execute(
        [shell(), "-c", command],
        timeout_s=timeout_s,
        max_output_bytes=max_output_bytes,
        env=env,
        cwd=root,
    )
