"""The lean upstream transport over TLS: a certificate made with `openssl` for a loopback
server is verified, and the connection reused (the plain-socket cases are in tests/unit/)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from app.providers.transport import LeanTransport
from tests.support.lean_upstream import CHUNKED, answer, client, upstream


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_verifies_the_certificate_and_reuses_the_connection(
    certificate: tuple[Path, Path],
) -> None:
    cert, key = certificate
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    async with upstream(answer(CHUNKED), tls=server_tls) as up:
        url = f"https://127.0.0.1:{up.port}/v1/chat"
        transport = LeanTransport(max_connections=2, verify=trusted)
        async with httpx.AsyncClient(transport=transport) as http:
            for _ in range(2):
                resp = await http.post(url, content=b"{}")
                assert resp.text == 'data: {"a":1}\n\ndata: {"b":2}\n\n'
        assert up.connections == 1
        # The same server with the system's trust store: a self-signed certificate fails.
        async with client() as http:
            with pytest.raises(httpx.ConnectError):
                await http.post(url, content=b"{}")
