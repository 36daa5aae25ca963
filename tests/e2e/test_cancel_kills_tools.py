"""A cancelled turn kills its tool's processes: a client hanging up (disconnect policy
`cancel`) or a second message interrupting (`X-Courier-Busy: interrupt`, a voice profile's
default) stops the terminal command and its whole process group, under bubblewrap and on
the local backend, and the transcript stays valid. A hang-up mid-answer closes the upstream
stream. The bound on "gone" is generous (the issue asks for 200 ms; benchmarks/
interrupt_latency.py measures it); what is asserted is that the process is gone."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.tools.sandbox.process import bwrap_available
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"
GONE_WITHIN_S = 5.0
"""Generous on a shared 2-core machine; the measured figure lives in the benchmark."""

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap does not work here")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cancel-tools")


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory, simulator: Simulator, root: Path) -> Server:
    """`courier` (sandbox), `host` (local backend) and `voice` (kind voice, sandbox)."""
    for name in ("courier", "host", "voice"):
        (root / name).mkdir()
    profile = (
        "[[profiles]]\n"
        'name = "{name}"\n'
        'provider = "openai"\n'
        f'base_url = "{simulator.base_url}/v1"\n'
        'api_key = "sim-upstream-key"\n'
        'model = "gpt-4o-mini"\n'
        'workspace = "{workspace}"\n'
        "{extra}\n"
    )
    config = root / "courier.toml"
    config.write_text(
        profile.format(name="host", workspace=root / "host", extra='terminal_backend = "local"')
        + profile.format(name="voice", workspace=root / "voice", extra='kind = "voice"')
    )
    return module_servers(
        COURIER_CONFIG=str(config),
        COURIER_WORKSPACE=str(root / "courier"),
        COURIER_APPROVALS_UNATTENDED="allow",
    )


def host_pids(marker: bytes) -> list[int]:
    """Host processes whose argv holds `marker` (NUL-separated, as in /proc/<pid>/cmdline)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # exited meanwhile
    return found


def wait_for(predicate: Any, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def sleeper(seconds: str) -> dict[str, Any]:
    """A terminal call writing its shell's pid, then becoming a long `sleep` (and a child)."""
    command = f"echo $$ > sleeper.pid; sleep {seconds} & exec sleep {seconds}"
    call = {"name": "terminal", "arguments": {"command": command}, "id": f"t{seconds}"}
    return {"reply": {"text": "Running it.", "tool_calls": [call]}}


class Turn:
    """A streamed turn in a thread; `hang_up()` closes its connection mid-stream."""

    def __init__(self, server: Server, model: str, text: str, **headers: str) -> None:
        self.server, self.model, self.text, self.headers = server, model, text, headers
        self.sid = ""
        self.lines: list[str] = []
        self.started = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = {
            "model": self.model,
            "stream": True,
            "messages": [{"role": "user", "content": self.text}],
        }
        with httpx.stream(
            "POST",
            f"{self.server.base_url}{URL}",
            json=body,
            headers=self.server.headers(**self.headers),
            timeout=60,
        ) as resp:
            self.sid = resp.headers["x-session-id"]
            self.started.set()
            for line in resp.iter_lines():
                self.lines.append(line)
                if self.stop.is_set():
                    return  # leaving the block closes the connection: a hang-up

    def start(self) -> Turn:
        self.thread.start()
        assert self.started.wait(30)
        return self

    def hang_up(self) -> None:
        self.stop.set()

    def join(self) -> None:
        self.thread.join(30)
        assert not self.thread.is_alive()


def _turns(server: Server, sid: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{server.base_url}/v1/sessions/{sid}/turns", headers=server.headers())
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


def _wait_turns(server: Server, sid: str, count: int) -> list[dict[str, Any]]:
    wait_for(
        lambda: len(t := _turns(server, sid)) == count and all(x["ended_at"] for x in t),
        30,
        "the turns did not end",
    )
    return _turns(server, sid)


def _upstream_shape(sim: Simulator) -> list[str]:
    messages = json.loads(sim.requests()[-1]["body"])["messages"]
    return [m["role"] for m in messages if m["role"] != "system"]


@pytest.mark.parametrize(("model", "seconds"), [("courier", "41.37"), ("host", "42.73")])
def test_a_hang_up_kills_the_command_and_its_group(
    srv: Server, sim: Simulator, root: Path, model: str, seconds: str
) -> None:
    workspace = root / model
    (workspace / "sleeper.pid").unlink(missing_ok=True)
    marker = f"sleep\x00{seconds}".encode()
    sim.script([sleeper(seconds), {"reply": {"text": "never asked"}}])
    turn = Turn(srv, model, "run the sleeper", **{"X-Courier-On-Disconnect": "cancel"}).start()
    wait_for(lambda: len(host_pids(marker)) == 2, 20, "the command never started")
    wait_for(lambda: (workspace / "sleeper.pid").exists(), 20, "no pid file")
    pid = int((workspace / "sleeper.pid").read_text())
    turn.hang_up()
    turn.join()
    # Both the command and the job it put in the background, SIGKILLed as a group, reaped.
    wait_for(lambda: not host_pids(marker), GONE_WITHIN_S, "the command outlived the hang-up")
    if model == "host":  # on the local backend the pid it wrote is a host pid
        # Reaped, within the bound: its argv is gone the moment it dies, and the zombie the
        # server has yet to wait for still holds /proc/<pid> a moment after (seen in CI).
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), GONE_WITHIN_S, "never reaped")
    [ended] = _wait_turns(srv, turn.sid, 1)
    assert ended["exit_reason"] == "cancelled"
    assert sim.status()["remaining"] == 1  # no call after the cancel
    # The next message sees a valid transcript: the killed call answered.
    sim.script([{"expect": {"last_user_contains": "again"}, "reply": {"text": "Fine."}}])
    resp = httpx.post(
        f"{srv.base_url}{URL}",
        json={"model": model, "messages": [{"role": "user", "content": "again"}]},
        headers=srv.headers(**{"X-Session-Id": turn.sid}),
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert _upstream_shape(sim) == ["user", "assistant", "tool", "user"]


def test_a_voice_barge_in_interrupts_and_kills_the_command(
    srv: Server, sim: Simulator, root: Path
) -> None:
    seconds = "43.19"
    marker = f"sleep\x00{seconds}".encode()
    sim.script(
        [
            sleeper(seconds),
            {"expect": {"last_user_contains": "stop that"}, "reply": {"text": "Stopped."}},
        ]
    )
    first = Turn(srv, "voice", "run the sleeper").start()
    wait_for(lambda: len(host_pids(marker)) == 2, 20, "the command never started")
    # No X-Courier-Busy: the voice profile's default is `interrupt`.
    resp = httpx.post(
        f"{srv.base_url}{URL}",
        json={"model": "voice", "messages": [{"role": "user", "content": "stop that"}]},
        headers=srv.headers(**{"X-Session-Id": first.sid}),
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Stopped."
    wait_for(lambda: not host_pids(marker), GONE_WITHIN_S, "the command outlived the barge-in")
    first.join()
    sim.assert_script_done()
    turns = _wait_turns(srv, first.sid, 2)
    assert [t["exit_reason"] for t in turns] == ["cancelled", "completed"]
    messages = json.loads(sim.requests()[-1]["body"])["messages"]
    assert _upstream_shape(sim) == ["user", "assistant", "tool", "user"]
    assert "cancelled" in messages[-2]["content"]


def test_a_hang_up_mid_answer_closes_the_upstream_stream(srv: Server, sim: Simulator) -> None:
    sim.configure(tokens_per_second=20)  # a 2.5 s answer: the hang-up lands mid-stream
    sim.script([{"reply": {"text": " ".join(["word"] * 50)}}])
    turn = Turn(srv, "courier", "talk slowly", **{"X-Courier-On-Disconnect": "cancel"}).start()
    wait_for(lambda: any('"content":"word' in line for line in turn.lines), 20, "no text")
    turn.hang_up()
    turn.join()
    wait_for(lambda: sim.stats()["disconnects"] == 1, GONE_WITHIN_S, "upstream left open")
    [ended] = _wait_turns(srv, turn.sid, 1)
    assert ended["exit_reason"] == "cancelled"
