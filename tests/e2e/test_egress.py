"""Egress with `network = true`: only through Courier's proxy, under the SSRF rules.

From inside the real sandbox: the host's loopback, a private address and the metadata
address are unreachable (through the proxy: refused; directly: no route), while an
allow-listed host is reachable. The allowed host lives in a network namespace this test
creates (ip netns + a veth pair, addresses chosen here), so no traffic leaves the machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.ops import ports
from app.tools.registry import ToolContext
from app.tools.sandbox import process as sandbox
from app.tools.terminal import TERMINAL

NS_ADDR, HOST_ADDR, PORT = "10.213.7.2", "10.213.7.1", 8080
ALLOWED = (f"{NS_ADDR}:{PORT}",)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@pytest.fixture(scope="module")
def test_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An HTTP server at NS_ADDR:PORT inside a fresh network namespace."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create a test network namespace")
    if not sandbox.bwrap_available():
        pytest.fail("bwrap is missing or cannot create a sandbox here; run `make install`")
    tag = f"{os.getpid() % 100000}"
    ns, host_if, ns_if = f"courier-egr-{tag}", f"cegh{tag}", f"cegn{tag}"
    root = tmp_path_factory.mktemp("egress-site")
    (root / "hello.txt").write_text("hello from the allowed host\n")
    _ip("netns", "add", ns)
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{HOST_ADDR}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("netns", "exec", ns, "ip", "addr", "add", f"{NS_ADDR}/30", "dev", ns_if)
        _ip("netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
        server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "python3",
                "-m",
                "http.server",
                str(PORT),
                "--bind",
                NS_ADDR,
                "--directory",
                str(root),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((NS_ADDR, PORT), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield NS_ADDR
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listener on the host's loopback, standing in for Courier's own port."""
    server = ports.listen("127.0.0.1", 0, backlog=8)  # one the host really reaches
    server.setblocking(False)
    yield server
    server.close()


async def _run(workspace: Path, command: str, **ctx: Any) -> str:
    context = ToolContext(session_id="s-egress", workspace=workspace, network=True, **ctx)
    return await TERMINAL.handler({"command": command, "timeout": 60}, context)


CURL = "curl -s -S --max-time 10 -o /dev/null -w '%{{http_code}}\\n' {url} 2>&1; echo rc=$?"
DIRECT = (
    "python3 -c \"import socket\ntry:\n socket.create_connection(('{host}', {port}), timeout=3)"
    "\n print('connected')\nexcept OSError as e:\n print('direct', e.errno)\""
)


async def test_the_allowed_host_is_reachable_through_the_proxy(
    test_host: str, workspace: Path
) -> None:
    url = f"http://{test_host}:{PORT}/hello.txt"
    out = await _run(
        workspace,
        f"curl -s -S --max-time 10 {url}; curl -s -S -p --max-time 10 {url}",
        fetch_allow_hosts=ALLOWED,
    )
    # Plain proxying, then a CONNECT tunnel (-p): both arrive.
    assert out == "exit code: 0\n" + "hello from the allowed host\n" * 2


async def test_loopback_private_and_metadata_are_unreachable(
    test_host: str, workspace: Path, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    targets = [
        f"http://127.0.0.1:{port}/",  # the host's loopback (Courier, the upstream)
        f"http://{HOST_ADDR}:{PORT}/",  # a private address that is not allow-listed
        f"http://{test_host}:{PORT + 1}/",  # the allowed host, on a port not allowed
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        f"http://localhost:{port}/",
    ]
    script = "\n".join(CURL.format(url=url) for url in targets)
    direct = "\n".join(
        DIRECT.format(host=h, port=p)
        for h, p in [("127.0.0.1", port), (test_host, PORT), ("169.254.169.254", 80)]
    )
    out = await _run(workspace, f"{script}\n{direct}", fetch_allow_hosts=ALLOWED)
    lines = out.splitlines()[1:]
    # Through the proxy: each one a 403 from the egress guard.
    assert lines[: 2 * len(targets)] == ["403", "rc=0"] * len(targets), out
    # Directly: no route at all (ENETUNREACH, or ECONNREFUSED on the sandbox's own lo).
    assert lines[2 * len(targets) :] == ["direct 111", "direct 101", "direct 101"], out
    with pytest.raises(BlockingIOError):  # nothing reached the host's listener
        listener.accept()


async def test_without_an_allow_list_entry_the_private_host_is_refused(
    test_host: str, workspace: Path
) -> None:
    out = await _run(workspace, CURL.format(url=f"http://{test_host}:{PORT}/hello.txt"))
    assert out.splitlines()[1:] == ["403", "rc=0"]
