"""A free port that really is free: one whose connections reach the listener bound to it.

The kernel calls a port free when no socket is bound to it, but a container runtime's port
mapping takes a port without binding it: podman (CNI) publishes `-p 127.0.0.1:P:8642` as a
DNAT rule, so every connection to 127.0.0.1:P goes to the container and one bound there by us
never sees any (refused, for as long as the mapping lives). Found when leaked test containers
held thirty such ports and about one server start in 300 picked one and never answered.
"""

from __future__ import annotations

import contextlib
import socket
import struct

# Enough to step past every published port a busy machine holds; each attempt costs a
# loopback connect (microseconds) or, for a mapping whose container accepts, the timeout.
ATTEMPTS = 64
PROBE_TIMEOUT_S = 1.0
_LINGER_RESET = struct.pack("ii", 1, 0)  # close with RST: no TIME_WAIT left on the port
_NONE_REACHED = (
    "no free port on {host} reached its own listener ({n} tried): connections to them go "
    "elsewhere (a container runtime's published ports?)"
)


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening socket on host:port; for port 0, one a connection to it really reaches."""
    if port != 0:
        return _bound(host, port, backlog)
    refused: list[socket.socket] = []
    try:
        for _ in range(ATTEMPTS):
            try:
                sock = _bound(host, 0, backlog)
            except OSError as exc:
                if not refused:
                    raise
                # The ephemeral range ran out with the refused ones held: say why.
                raise OSError(_NONE_REACHED.format(host=host, n=len(refused))) from exc
            if _reaches(sock):
                return sock
            refused.append(sock)  # held open until the end, so the kernel offers another
        raise OSError(_NONE_REACHED.format(host=host, n=len(refused)))
    finally:
        for sock in refused:
            sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A port to hand to another process, checked the same way (it binds it itself)."""
    with listen(host, 0, backlog=1) as sock:
        return int(sock.getsockname()[1])


def _bound(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def _reaches(sock: socket.socket) -> bool:
    """Whether a connection to the socket's address arrives at this very socket."""
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if sock.family == socket.AF_INET else "::1"
    sock.settimeout(PROBE_TIMEOUT_S)
    try:
        with socket.socket(sock.family, socket.SOCK_STREAM) as probe:
            probe.settimeout(PROBE_TIMEOUT_S)
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
            try:
                probe.connect((host, port))
                accepted, peer = sock.accept()
            except OSError:
                return False  # refused, or connected somewhere else and never accepted here
            with accepted:
                accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                return bool(peer[:2] == probe.getsockname()[:2])
    finally:
        with contextlib.suppress(OSError):
            sock.settimeout(None)
