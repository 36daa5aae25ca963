"""The toolbox over HTTP: scheduling order, repair, progress events, memory across sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ws")


@pytest.fixture(scope="module")
def tools_server(module_servers: ServerFactory, workspace: Path) -> Server:
    return module_servers(COURIER_WORKSPACE=str(workspace))


def _post(server: Server, text: str, **headers: str) -> httpx.Response:
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=server.headers(**headers),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp


def _tool_results(sim: Simulator, request_index: int = -1) -> list[str]:
    body = json.loads(sim.requests()[request_index]["body"])
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": args}


@pytest.mark.parametrize("repeat", range(2))
def test_read_then_patch_sees_the_original(
    tools_server: Server, sim: Simulator, workspace: Path, repeat: int
) -> None:
    (workspace / "a.txt").write_text("before\n")
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        _call("read_file", path="a.txt"),
                        _call("patch", path="a.txt", old_string="before", new_string="after"),
                    ]
                }
            },
            {"reply": {"text": "ok"}},
        ]
    )
    _post(tools_server, "read then patch")
    read, patched = _tool_results(sim)
    assert "before" in read and "after" not in read
    assert not patched.startswith("error")
    assert (workspace / "a.txt").read_text() == "after\n"


@pytest.mark.parametrize("repeat", range(2))
def test_patch_then_read_sees_the_change(
    tools_server: Server, sim: Simulator, workspace: Path, repeat: int
) -> None:
    (workspace / "a.txt").write_text("before\n")
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        _call("patch", path="a.txt", old_string="before", new_string="after"),
                        _call("read_file", path="a.txt"),
                    ]
                }
            },
            {"reply": {"text": "ok"}},
        ]
    )
    _post(tools_server, "patch then read")
    patched, read = _tool_results(sim)
    assert not patched.startswith("error")
    assert "after" in read and "before" not in read


def test_empty_and_near_miss_names_get_different_replies(
    tools_server: Server, sim: Simulator, workspace: Path
) -> None:
    (workspace / "b.txt").write_text("one\ntwo\nthree\n")
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        _call(""),
                        _call("ReadFile", path="b.txt", offset="2", limit="1"),
                        _call("frobnicate"),
                    ]
                }
            },
            {"reply": {"text": "ok"}},
        ]
    )
    _post(tools_server, "names")
    empty, repaired, unknown = _tool_results(sim)
    assert empty == "error: the tool call has no name"
    assert "two" in repaired and "one" not in repaired  # repaired and coerced
    assert unknown.startswith("error: unknown tool 'frobnicate'; available:")
    assert "read_file" in unknown
    # The stored call carries the repaired name, so the transcript replays valid.
    body = json.loads(sim.requests()[-1]["body"])
    names = [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    assert names == ["", "read_file", "frobnicate"]


def test_tool_progress_events_only_when_opted_in(tools_server: Server, sim: Simulator) -> None:
    turn = [{"reply": {"tool_calls": [_call("list_files")]}}, {"reply": {"text": "done"}}]

    def stream(**headers: str) -> list[str]:
        with httpx.stream(
            "POST",
            f"{tools_server.base_url}/v1/chat/completions",
            json={
                "model": "courier",
                "stream": True,
                "messages": [{"role": "user", "content": "x"}],
            },
            headers=tools_server.headers(**headers),
            timeout=30,
        ) as resp:
            return list(resp.iter_lines())

    def chunks(lines: list[str]) -> list[dict[str, Any]]:
        data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
        return [json.loads(d) for d in data if d != "[DONE]"]

    sim.script(turn)
    plain = stream()
    assert not [line for line in plain if line.startswith("event:")]
    assert not [c for c in chunks(plain) if "courier" in c]
    sim.script(turn)
    lines = stream(**{"X-Courier-Events": "tools"})
    # Progress rides in ordinary chunks (an empty delta), never as named events: the
    # official SDKs parse every data line as a chunk and crash on anything else.
    assert not [line for line in lines if line.startswith("event:")]
    progress = [c for c in chunks(lines) if "courier" in c]
    assert all(c["choices"] == [{"index": 0, "delta": {}, "finish_reason": None}] for c in progress)
    payloads = [c["courier"] for c in progress]
    assert [p["type"] for p in payloads] == ["tool.started", "tool.finished"]
    assert payloads[1]["name"] == "list_files" and payloads[1]["ok"] is True
    assert "arguments" not in payloads[0]


def test_memory_reaches_the_next_session_not_this_one(tools_server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [_call("memory", action="add", text="User prefers tabs.")]}},
            {"reply": {"text": "noted"}},
            {"expect": {"system_contains": "User prefers tabs."}, "reply": {"text": "tabs it is"}},
        ]
    )
    first = _post(tools_server, "remember tabs")
    body = json.loads(sim.requests()[-1]["body"])
    assert "User prefers tabs." not in body["messages"][0]["content"]  # frozen snapshot
    assert first.json()["choices"][0]["message"]["content"] == "noted"
    _post(tools_server, "new session")
    sim.assert_script_done()


def test_todo_and_session_search(tools_server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "The quetzal migration plan is ready."}}])
    _post(tools_server, "plan the quetzal migration")
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        _call("todo", action="add", items=["draft", "review"]),
                        _call("session_search", query="quetzal"),
                    ]
                }
            },
            {"reply": {"text": "ok"}},
        ]
    )
    _post(tools_server, "track it")
    todo, found = _tool_results(sim)
    assert "draft" in todo and "review" in todo
    assert "quetzal" in found.lower()


def test_big_command_output_is_spilled_previewed_and_paged_back(
    tools_server: Server, sim: Simulator, workspace: Path
) -> None:
    command = "python3 -c \"print('\\n'.join('line %06d ' % i + 'x' * 40 for i in range(6000)))\""
    # The paging steps need the spill path, known only after the first call, so the
    # conversation runs in two turns.
    spill_dir = workspace / ".courier" / "spill"
    sim.script(
        [
            {"reply": {"tool_calls": [_call("terminal", command=command)]}},
            {"reply": {"text": "spilled"}},
        ]
    )
    _post(tools_server, "make a lot of output")
    [preview] = _tool_results(sim)
    files = sorted(spill_dir.iterdir(), key=lambda p: p.stat().st_mtime)
    spilled = files[-1]
    relative = str(spilled.relative_to(workspace))
    assert len(preview) < 5_000 and relative in preview and "read_file" in preview
    assert preview.startswith("exit code: 0")
    assert spilled.read_text().count("\n") >= 6000  # the full text, not the preview
    stored = _stored_tool_rows(tools_server)
    assert any(len(row) > 300_000 for row in stored)  # the row keeps the full text

    sim.script(
        [
            {"reply": {"tool_calls": [_call("read_file", path=relative, offset=5990, limit=20)]}},
            {"reply": {"tool_calls": [_call("read_file", path=relative, limit=6000)]}},
            {"reply": {"text": "paged"}},
        ]
    )
    _post(tools_server, "page it back")
    page = _tool_results(sim, -2)[-1]
    assert "line 005995" in page
    whole = _tool_results(sim)[-1]
    # The file reader's own output is never spilled, however large: recovery cannot recurse.
    assert ".courier/spill" not in whole and len(whole) > 90_000


def _stored_tool_rows(server: Server) -> list[str]:
    import sqlite3

    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return [r[0] for r in con.execute("SELECT content FROM message WHERE role = 'tool'")]
    finally:
        con.close()
