"""The server raises its own open-files soft limit for the streams its turn cap allows,
and a sandboxed command still starts with 1,024 (select()'s FD_SETSIZE): read from the
server's /proc limits and from what the command itself reports."""

from __future__ import annotations

import json
import re
import resource
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.ops.open_files import needed_for
from app.tools.sandbox.process import bwrap_available
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap does not work here")


def _soft_open_files(pid: int) -> int:
    limits = Path(f"/proc/{pid}/limits").read_text()
    found = re.search(r"^Max open files\s+(\d+)", limits, re.M)
    assert found, limits
    return int(found.group(1))


@pytest.fixture
def server(servers: ServerFactory) -> Iterator[Server]:
    # Started under systemd's default soft limit (1,024), which the server must raise.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        started = servers(COURIER_APPROVALS_UNATTENDED="allow")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    yield started


def test_the_server_has_room_for_its_streams_and_a_command_gets_1024(
    server: Server, sim: Simulator
) -> None:
    assert server.proc is not None
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert _soft_open_files(server.proc.pid) == min(needed_for(1024), hard)
    call = {"name": "terminal", "arguments": {"command": "ulimit -Sn"}, "id": "c_nofile"}
    sim.script([{"reply": {"text": "", "tool_calls": [call]}}, {"reply": {"text": "done"}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "how many files?"}]}
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=60
    )
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    (result,) = [
        m["content"]
        for m in json.loads(sim.requests()[-1]["body"])["messages"]
        if m["role"] == "tool"
    ]
    assert result.split()[-1] == str(min(1024, hard)), result
