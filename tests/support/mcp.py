"""MCP servers for the tests: the toolbox double over stdio or HTTP, and config files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.server import free_port

TOOLBOX = Path(__file__).resolve().parent / "mcp_servers" / "toolbox.py"
TIME_SERVER = str(Path(sys.prefix) / "bin" / "mcp-server-time")


def stdio_toolbox(**extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(TOOLBOX), "stdio"], **extra}


def write_config(path: Path, servers: dict[str, dict[str, object]]) -> Path:
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def toolbox_counts(state_dir: Path) -> dict[str, int]:
    try:
        return dict(json.loads((state_dir / "toolbox.json").read_text()))
    except FileNotFoundError:
        return {}


@contextmanager
def http_toolbox(state_dir: Path) -> Iterator[str]:
    """The toolbox over streamable HTTP on a loopback port; yields its /mcp URL."""
    port = free_port()
    state_dir.mkdir(parents=True, exist_ok=True)
    log = (state_dir / f"http-toolbox-{port}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, str(TOOLBOX), "http", str(port)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(state_dir)},
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(600):
            if proc.poll() is not None:
                raise RuntimeError(f"the HTTP toolbox exited with {proc.returncode}")
            try:
                httpx.get(url, timeout=0.5, trust_env=False)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
