"""Running one shell command in the sandbox, or, when a profile asks, on the host.

Whether a sandbox starts here at all (probed once, with the profile a container may need),
the limits a command runs under (a process count, CPU seconds, file size and memory), its
output captured within a cap, and every process it started killed and reaped when it
ends, times out or is cancelled. The command line comes from `argv.py`, what it may see
from `policy.py`; the package's docstring says what the sandbox holds and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import resource
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.security.egress import (
    BRIDGE_SOURCE,
    PROXY_PORT,
    SOCKET_DIR_IN_SANDBOX,
    SOCKET_NAME,
    EgressProxy,
    bridge_python,
)
from app.tools.sandbox.argv import (
    HOST_ENV,
    bwrap_argv,
    bwrap_options,
    fd_list,
    find_bwrap,
    sandbox_inputs,
)
from app.tools.sandbox.cgroups import read_text
from app.tools.sandbox.memory_cgroup import MemoryCgroup
from app.tools.sandbox.pids_cgroup import PidsCgroup, pids_cgroup_parent
from app.tools.sandbox.policy import (
    CONTAINER_FALLBACKS,
    FULL_PROFILE,
    SANDBOX_PATH,
    SandboxError,
    SandboxProfile,
    sandbox_env,
    shell,
)

log = logging.getLogger(__name__)

MAX_PROCESSES = 512
"""Tasks (processes and threads) one command may have at once. Threads count too, so this
leaves room for a parallel build or a JVM; a fork bomb stops here."""
MAX_OUTPUT_BYTES = 1_000_000
"""Output kept per call (head and tail halves). Well above the spill threshold on purpose:
the spill layer relocates a large result to a file without losing any of it, so capping
here at the spill size would throw away exactly what spilling exists to keep. This cap only
bounds memory against a command that prints forever."""
CPU_GRACE_S = 5
"""Extra CPU seconds between RLIMIT_CPU's soft limit (SIGXCPU) and its hard one (SIGKILL)."""
COMMAND_OPEN_FILES = 1024
"""A sandboxed command's open-files soft limit: select()'s FD_SETSIZE."""
KILL_GRACE_S = 2.0
"""After the command ends, how long to wait for its output pipe to close."""
PROBE_RETRY_S = 60.0


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
    bwrap = find_bwrap()
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
    with tempfile.TemporaryDirectory() as ws, sandbox_inputs(profile) as (fds, seccomp):
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
                env=HOST_ENV,
                pass_fds=fd_list(fds, seccomp),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"bwrap failed to run: {exc}"
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip() or "no message"
        return f"bwrap exited {proc.returncode}: {detail}"
    return None


def process_limit_enforced() -> bool:
    """Whether a sandboxed fork bomb hits a limit: a pids cgroup, or RLIMIT_NPROC (not root)."""
    return os.geteuid() != 0 or pids_cgroup_parent() is not None


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
    bwrap = find_bwrap()
    if bwrap is None:
        raise SandboxError("bwrap (bubblewrap) is not installed")
    if profile is None:
        status = await asyncio.to_thread(sandbox_status)
        if status.profile is None:
            raise SandboxError(f"the command sandbox cannot start: {status.reason}")
        profile = status.profile
    root = workspace.resolve()
    root.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(bwrap_options, bwrap)  # cached `bwrap --help`, off the loop
    rlimit = await asyncio.to_thread(_nproc_rlimit, max_processes)
    cgroup = await asyncio.to_thread(PidsCgroup.create, max_processes)
    memory = (
        await asyncio.to_thread(MemoryCgroup.create, limits.memory_bytes)
        if limits is not None
        else None
    )
    try:
        prefix = _limits_prefix(rlimit, limits, cgroup=cgroup, memory=memory)
        with sandbox_inputs(profile) as (fds, seccomp):
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
                env=HOST_ENV,
                pass_fds=fd_list(fds, seccomp),
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


def _limits_prefix(
    rlimit: int,
    limits: ResourceLimits | None,
    *,
    cgroup: PidsCgroup | None,
    memory: MemoryCgroup | None,
) -> list[str]:
    """What runs before bwrap to put the command under its limits: a shell that joins the
    cgroups, then prlimit with the rlimits (`rlimit`: RLIMIT_NPROC's value)."""
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
        prefix += [prlimit, f"--nproc={rlimit}:{rlimit}", "--core=0:0", _nofile()]
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
    return prefix


def _nofile() -> str:
    """prlimit's option putting the open-files soft limit back to 1,024 (the hard limit
    stays): the server raised its own for its streams (app/ops/open_files.py), and a
    program using select() breaks on a descriptor past FD_SETSIZE."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    soft = COMMAND_OPEN_FILES if hard == resource.RLIM_INFINITY else min(COMMAND_OPEN_FILES, hard)
    return f"--nofile={soft}:"


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
