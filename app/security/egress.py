"""The only way out of a sandbox with `network = true`: an HTTP proxy applying the SSRF rules.

Sharing the host's network namespace gave `terminal` the host's loopback with no guard:
curl reached Courier's own /health, the upstream's port and any LAN or metadata address,
which made the SSRF guard on `web_fetch` moot. Now the sandbox keeps its own, empty network
namespace (loopback only) and gets one way out: a Unix socket bound into it, served here by
an HTTP proxy (CONNECT for TLS, absolute-form requests for plain HTTP) that resolves every
destination itself and checks it with `app/security/ssrf.py`, the same rules and allow-list
as `web_fetch`, before connecting to the checked address (so DNS cannot swap one in).

Inside the sandbox a tiny bridge (BRIDGE_SOURCE, run by the sandbox's python3) listens on
127.0.0.1:PROXY_PORT and forwards each connection to the socket; `http_proxy` and friends
point there. A program that ignores the proxy variables has no route anywhere: direct
sockets fail with "network unreachable".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from app.security.ssrf import AddressRefused, ResolutionFailed, resolve_and_check

log = logging.getLogger(__name__)

PROXY_PORT = 3128
SOCKET_DIR_IN_SANDBOX = "/run/courier-egress"
SOCKET_NAME = "egress.sock"
HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 64
"""Concurrent proxied connections per sandboxed call."""

BRIDGE_SOURCE = r"""
import os, socket, sys, threading
port, path = int(sys.argv[1]), sys.argv[2]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
if os.fork():
    os._exit(0)
def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def serve(conn):
    up = socket.socket(socket.AF_UNIX)
    try:
        up.connect(path)
    except OSError:
        conn.close()
        return
    threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
    pipe(conn, up)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
"""Runs inside the sandbox: binds the port, then forks so the command starts only once the
bridge is listening."""


def proxy_env() -> dict[str, str]:
    """Variables pointing HTTP clients (curl, pip, npm, git, requests) at the bridge."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    env = {name: url for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    env["ALL_PROXY"] = env["all_proxy"] = url
    return env


def bridge_python() -> str | None:
    """The sandbox's python3 (the host's /usr is bound read-only into it), if there is one."""
    return shutil.which("python3", path="/usr/bin:/bin")


def _split_authority(authority: str) -> tuple[str, int] | None:
    host, sep, port = authority.rpartition(":")
    if not sep or not port.isdigit():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    number = int(port)
    return (host, number) if host and 0 < number < 65536 else None


class EgressProxy:
    """One proxy per sandboxed call, on a Unix socket in a private temp directory."""

    def __init__(self, allow: Sequence[str]) -> None:
        self.allow = tuple(allow)
        self.directory = Path(tempfile.mkdtemp(prefix="courier-egress-"))
        self.socket_path = self.directory / SOCKET_NAME
        self._server: asyncio.AbstractServer | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._tasks: set[asyncio.Task[None]] = set()
        self.refused: list[str] = []
        """Destinations refused during the call, for the log and for tests."""

    async def __aenter__(self) -> EgressProxy:
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path))
        # The sandbox user (a mapped uid) must be able to connect.
        self.socket_path.chmod(0o666)
        self.directory.chmod(0o755)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        shutil.rmtree(self.directory, ignore_errors=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            async with self._slots:
                await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            return await _reply(writer, 431, "request head too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3:
            return await _reply(writer, 400, "malformed request line")
        method, target, version = parts
        if method == "CONNECT":
            authority = _split_authority(target)
            if authority is None:
                return await _reply(writer, 400, "CONNECT needs host:port")
            host, port = authority
            forward = b""
        else:
            url = urlsplit(target)
            if url.scheme != "http" or not url.hostname:
                return await _reply(writer, 400, "only http:// URLs or CONNECT are proxied")
            try:
                host, port = url.hostname, url.port or 80
            except ValueError:
                return await _reply(writer, 400, "bad port")
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            kept = [
                line
                for line in lines[1:]
                if line and not line.lower().startswith(("proxy-", "connection:", "keep-alive:"))
            ]
            forward = (
                "\r\n".join([f"{method} {path} {version}", *kept, "Connection: close", "", ""])
            ).encode("latin-1")
        try:
            addresses = await resolve_and_check(host, port, allow=self.allow)
        except AddressRefused as exc:
            self.refused.append(f"{host}:{port}")
            log.info("egress refused %s:%d: %s", host, port, exc)
            return await _reply(writer, 403, f"refused by Courier's egress guard: {exc}")
        except ResolutionFailed as exc:
            return await _reply(writer, 502, str(exc))
        upstream = await _connect(addresses, port)
        if upstream is None:
            return await _reply(writer, 502, f"could not connect to {host}:{port}")
        up_reader, up_writer = upstream
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(forward)
            await asyncio.gather(_relay(reader, up_writer), _relay(up_reader, writer))
        finally:
            up_writer.close()


async def _connect(
    addresses: Sequence[str], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    for address in addresses:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await asyncio.open_connection(address, port)
        except (OSError, TimeoutError):
            continue
    return None


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()


async def _reply(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 431: "Too Large", 502: "Bad Gateway"}
    body = (message + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()
