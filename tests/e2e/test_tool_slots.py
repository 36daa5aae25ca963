"""COURIER_MAX_CONCURRENT_TOOLS over real HTTP: two turns' sandboxed commands, with one tool
slot, never run at the same time, and both run. Each command marks its start and end in the
shared workspace and, while it runs, looks for another command started and not ended; the
outputs the model got back are counted (no timing is asserted)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.tools.sandbox.process import bwrap_available
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap does not work here")


def watch(me: str, other: str) -> str:
    """Mark `me` started, then for 5 s report `other` if it started and has not ended:
    without a cap the two commands see each other; with one slot, never. (Fixed names: the
    command guard holds a write to a path it cannot read from the command line.)"""
    return (
        f"touch {me}.start; for i in $(seq 50); do "
        f"if [ -e {other}.start ] && [ ! -e {other}.end ]; then echo OVERLAP; fi; "
        f"sleep 0.1; done; touch {me}.end; echo watched"
    )


@pytest.fixture
def one_slot(servers: ServerFactory, tmp_path: Path) -> tuple[Server, Path]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = servers(
        COURIER_WORKSPACE=str(workspace),
        COURIER_APPROVALS_UNATTENDED="allow",
        COURIER_MAX_CONCURRENT_TOOLS="1",
    )
    return server, workspace


def _turn(server: Server, text: str, answers: list[dict[str, Any]]) -> None:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=120
    )
    answers.append(resp.json())


def test_one_tool_slot_runs_two_turns_commands_one_after_the_other(
    one_slot: tuple[Server, Path], sim: Simulator
) -> None:
    server, workspace = one_slot
    calls = [
        {"name": "terminal", "arguments": {"command": watch(me, other)}, "id": f"c_{me}"}
        for me, other in (("a", "b"), ("b", "a"))
    ]
    sim.script(
        [{"reply": {"text": "", "tool_calls": [call]}} for call in calls]
        + [{"reply": {"text": "done"}}] * 2
    )
    answers: list[dict[str, Any]] = []
    threads = [threading.Thread(target=_turn, args=(server, f"turn {n}", answers)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [a["choices"][0]["message"]["content"] for a in answers] == ["done", "done"], answers
    sim.assert_script_done()
    results = [
        m["content"]
        for r in sim.requests()
        for m in json.loads(r["body"])["messages"]
        if m["role"] == "tool"
    ]
    assert len(results) == 2 and all("watched" in r for r in results), results
    assert not [r for r in results if "OVERLAP" in r]
    assert len(list(workspace.glob("*.end"))) == 2
