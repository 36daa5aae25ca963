"""The large-body parse worker dies with its server, even one killed with SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.api.http.body_limits import OFF_LOOP_BYTES
from tests.support.server import ServerFactory


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_killed_server_leaves_no_parse_worker_behind(servers: ServerFactory) -> None:
    server = servers()
    try:
        assert server.proc is not None
        # A body past the off-loop threshold starts the worker (the request itself is a 400).
        big = b'{"model": "courier", "messages": [], "pad": "' + b"x" * OFF_LOOP_BYTES + b'"}'
        httpx.post(
            f"{server.base_url}/v1/chat/completions",
            content=big,
            headers={**server.headers(), "Content-Type": "application/json"},
            timeout=60,
        )
        workers = _children(server.proc.pid)
        assert workers, "the parse worker did not start"
    finally:
        server.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.05)
    alive = [
        w
        for w in workers
        if Path(f"/proc/{w}/stat").exists()
        and Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    ]
    assert alive == [], f"orphaned parse worker(s): {alive}"
