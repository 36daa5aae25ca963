"""web_fetch over https: the connection is pinned to the checked address and the name is
verified, against a loopback TLS site whose certificate `openssl` makes (the rest of the
SSRF guard is checked in-process in tests/unit/test_web_fetch.py)."""

from __future__ import annotations

import http.server
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.tools import web
from app.tools.registry import ToolError
from tests.support.web_site import FakeDNS, Handler, Site, ctx, fetch, serve

pytestmark = pytest.mark.usefixtures("dns")


@pytest.fixture(scope="module")
def tls_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Site, Path, list[str]]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    root = tmp_path_factory.mktemp("tls")
    cert, key = root / "cert.pem", root / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=secure.test"),
            *("-addext", "subjectAltName=DNS:secure.test"),
        ],
        check=True,
        capture_output=True,
    )
    hits: list[tuple[str, str]] = []
    sni: list[str] = []
    handler = type("TLSHandler", (Handler,), {"hits": hits})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda _sock, name, _ctx: sni.append(str(name)) or None
    server.socket = context.wrap_socket(server.socket, server_side=True)
    for _ in serve(server):
        yield Site(port=server.server_address[1], hits=hits), cert, sni


async def test_https_pins_address_and_verifies_the_name(
    tls_site: tuple[Site, Path, list[str]], dns: FakeDNS, monkeypatch: pytest.MonkeyPatch
) -> None:
    site, cert, sni = tls_site
    monkeypatch.setattr(web, "_TLS_VERIFY", ssl.create_default_context(cafile=str(cert)))
    dns.table["secure.test"] = ["127.0.0.1"]
    url = f"https://secure.test:{site.port}/host"
    out = await fetch(url, ctx(allow=("secure.test:*",)))
    assert f"you asked for host secure.test:{site.port} at this server" in out
    assert sni[-1] == "secure.test"
    # The certificate names secure.test, not the address we dialled: fetching by address
    # fails verification, which shows the check above really was against the name.
    with pytest.raises(ToolError, match="CERTIFICATE_VERIFY_FAILED"):
        await fetch(f"https://127.0.0.1:{site.port}/host", ctx(allow=("127.0.0.1:*",)))
