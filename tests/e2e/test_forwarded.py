"""Per-IP limits behind a trusted proxy, over real HTTP: the real server, and the shipped
deploy/nginx.conf in front of it (skipped without nginx and openssl).

Requests are held in flight by a simulator step that waits before answering; the next one
of the same client must be refused while another client passes. Counted, never timed."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.held import error_code, held_then
from tests.support.paths import REPO
from tests.support.server import Server, ServerFactory, free_port
from tests.support.sim import Simulator

CAP = 3
DEPLOY = REPO / "deploy"


@pytest.fixture(scope="module")
def proxied(module_servers: ServerFactory) -> Server:
    return module_servers(
        COURIER_TRUSTED_PROXIES="127.0.0.1,::1", COURIER_MAX_CONNECTIONS_PER_IP=str(CAP)
    )


def test_behind_a_trusted_proxy_each_client_is_counted_alone(
    proxied: Server, sim: Simulator
) -> None:
    url = f"{proxied.base_url}/v1/chat/completions"

    async def scenario() -> list[httpx.Response]:
        # One client, one connection each: the proxy's own address holds CAP + 2 of them,
        # which the connection guard would cut were the proxy not trusted.
        clients = [httpx.AsyncClient(trust_env=False) for _ in range(CAP + 2)]
        try:
            return await held_then(
                sim,
                url,
                proxied.headers(),
                held=[(c, {"X-Forwarded-For": "203.0.113.1"}) for c in clients[:CAP]],
                probes=[
                    # A spoofed hop on the left changes nothing: the proxy wrote the right.
                    (clients[CAP], {"X-Forwarded-For": "198.51.100.9, 203.0.113.1"}),
                    (clients[CAP + 1], {"X-Forwarded-For": "203.0.113.2"}),
                ],
            )
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    refused, passed = asyncio.run(scenario())
    assert error_code(refused) == "too_many_connections" and refused.headers["retry-after"] == "1"
    assert error_code(passed) is None and "quick" in passed.text


def test_an_untrusted_peer_is_counted_by_its_address_whatever_it_forwards(
    proxied: Server,
) -> None:
    # 127.0.0.2 is not a trusted proxy: its connections are its own, header or not.
    def connect() -> socket.socket:
        return socket.create_connection(
            ("127.0.0.1", proxied.port), source_address=("127.0.0.2", 0)
        )

    held = [connect() for _ in range(CAP)]
    try:
        with connect() as extra:
            extra.sendall(
                b"GET /health HTTP/1.1\r\nHost: courier\r\nX-Forwarded-For: 203.0.113.3\r\n\r\n"
            )
            extra.settimeout(10)
            try:
                answer = extra.recv(4096)
            except ConnectionResetError:
                answer = b""
        assert answer == b"", answer  # closed unanswered, as any fourth connection
    finally:
        for s in held:
            s.close()


# ------------------------------------------------------------------------ the shipped nginx


def _nginx() -> str | None:
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")


@pytest.fixture
def nginx_front(tmp_path: Path, proxied: Server) -> Iterator[str]:
    """deploy/nginx.conf as shipped, but with test certificates, free ports and its files in
    `tmp_path`, in front of `proxied`; yields its https base URL."""
    nginx, openssl = _nginx(), shutil.which("openssl")
    if nginx is None or openssl is None:
        pytest.skip("nginx or openssl is not installed (Debian packages nginx-light, openssl)")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=courier.test", "-keyout", str(tmp_path / "key.pem"),
         "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    https, http = free_port(), free_port()
    text = (DEPLOY / "nginx.conf").read_text()
    for old, new in {
        "/etc/ssl/courier/fullchain.pem": str(tmp_path / "cert.pem"),
        "/etc/ssl/courier/privkey.pem": str(tmp_path / "key.pem"),
        "/var/log/nginx/": f"{tmp_path}/",
        "/run/": f"{tmp_path}/",
        "server 127.0.0.1:8642;": f"server 127.0.0.1:{proxied.port};",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{https} ssl http2;",
        "listen 80;": f"listen 127.0.0.1:{http};",
        "listen [::]:443 ssl http2;": "",
        "listen [::]:80;": "",
    }.items():
        assert old in text, f"deploy/nginx.conf no longer has {old!r}: update this test"
        text = text.replace(old, new)
    conf = tmp_path / "nginx.conf"
    conf.write_text(text)
    proc = subprocess.Popen(
        [nginx, "-c", str(conf), "-p", str(tmp_path), "-e", str(tmp_path / "err.log"),
         "-g", "daemon off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", https), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"https://127.0.0.1:{https}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_shipped_nginx_config_makes_each_client_count_alone(
    nginx_front: str, proxied: Server, sim: Simulator
) -> None:
    url = f"{nginx_front}/v1/chat/completions"

    def client(source: str) -> httpx.AsyncClient:
        transport = httpx.AsyncHTTPTransport(local_address=source, verify=False)
        return httpx.AsyncClient(transport=transport, trust_env=False)

    async def scenario() -> list[httpx.Response]:
        near = [client("127.0.0.2") for _ in range(CAP + 1)]
        far = client("127.0.0.3")
        try:
            return await held_then(
                sim,
                url,
                proxied.headers(),
                held=[(c, {}) for c in near[:CAP]],
                probes=[
                    # A forged header is passed over: nginx names the peer on the right.
                    (near[CAP], {"X-Forwarded-For": "1.2.3.4"}),
                    (far, {}),
                ],
            )
        finally:
            await asyncio.gather(*(c.aclose() for c in [*near, far]))

    refused, passed = asyncio.run(scenario())
    assert error_code(refused) == "too_many_connections"
    assert error_code(passed) is None and "quick" in passed.text
