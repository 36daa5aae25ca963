"""What a sandboxed command may see and use: the sandbox's policy, apart from how bwrap is
told it (`argv.py`) and how the command is run (`process.py`).

The user it runs as, the host files it may read (an allowlist, never the whole of /etc),
the files synthesised for it, its environment (built from nothing), and the isolation
steps a profile keeps; what a container may drop is named with the option that restores
it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

SANDBOX_WORKSPACE = "/workspace"
SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_USER = "courier"
SANDBOX_HOSTNAME = "courier-sandbox"
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

TMP_SIZE_BYTES = 512 * 1024 * 1024

SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
ETC_ALLOWLIST = (
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
ETC_GLOBS = ("python3*", "java-*")
"""Runtime config dirs: Debian's python links sitecustomize.py here and its JVM refuses to
start without its java.security file."""
NETWORK_ETC = ("/etc/resolv.conf",)
PROC_COVER = ("sys", "sysrq-trigger", "irq", "bus", "acpi", "fs", "scsi")
"""Re-bound read-only over the sandbox's own /proc: files here are guarded only by being
owned by uid 0, which a sandbox run by root passes (see app/tools/sandbox/__init__.py)."""


PROC_MASK = ("keys", "key-users")
"""Emptied in the sandbox: they list the host keyring's entries (names, owners, quotas).
The keyring syscalls themselves are refused by the seccomp filter."""


class SandboxError(Exception):
    """The sandbox could not be set up (bwrap missing or failing); the command did not run."""


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
