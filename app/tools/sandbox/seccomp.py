"""The sandbox's seccomp filter: no setuid files, no keyrings, no nested user namespaces.

Files the sandbox creates in the workspace belong, on the host, to the uid running Courier.
If the command could set their setuid bit, `cp /bin/sh x; chmod u+s x` would leave a
setuid-root shell (or setuid-courier, with the server's keys in reach) in the workspace for
any local user who can reach the data directory. Ownership is all chmod checks, so only a
syscall filter stops it: the mode-taking calls fail with EPERM when the mode carries
S_ISUID or S_ISGID. openat2 and io_uring are refused with ENOSYS because their modes sit
where a filter cannot read them (libc falls back to openat). The keyring calls (add_key,
request_key, keyctl) are refused too: the sandbox shares the host's kernel keyrings, so a
command could otherwise read or join the caller's session keyring.
"""

from __future__ import annotations

import functools
import logging
import platform
import struct

log = logging.getLogger(__name__)

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
