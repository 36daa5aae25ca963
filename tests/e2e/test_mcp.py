"""MCP servers as tool sources, end to end: the real Courier server over HTTP, the
simulator scripting the model's tool calls, and real MCP servers (the SDK-built toolbox
over stdio and HTTP, and the third-party mcp-server-time)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.support.approvals import BackgroundTurn, call, decide, pending, tool_results
from tests.support.mcp import (
    TIME_SERVER,
    http_toolbox,
    stdio_toolbox,
    toolbox_counts,
    write_config,
)
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

HEADER_SECRET = "Bearer web-token-0123456789abcdef"
ENV_SECRET = "file-given-token-0123456789"
OPEN = "<<<UNTRUSTED MCP RESULT from "
ADMIN_KEY = "admin-key-for-mcp-tests-0123456789"
NARROW_KEY = "narrow-key-for-mcp-tests-9876543210"


@pytest.fixture(scope="module")
def mcp_server(
    module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("mcp")
    with http_toolbox(root / "web") as url:
        config = write_config(
            root / "mcp.json",
            {
                # Trusted by the operator: its tools that change things (grow, crash) run
                # unasked; `gate` asks for every call.
                "toolbox": stdio_toolbox(env={"TOOLBOX_TOKEN": ENV_SECRET}, approval="never"),
                "gate": {**stdio_toolbox(), "approval": "always"},
                "web": {"url": url, "headers": {"Authorization": HEADER_SECRET}},
                "time": {"command": TIME_SERVER, "args": ["--local-timezone", "UTC"]},
            },
        )
        keys = root / "keys.toml"
        keys.write_text(
            f'[[keys]]\nname = "narrow"\nkey = "{NARROW_KEY}"\nmcp_servers = ["time"]\n'
        )
        server = module_servers(
            COURIER_CONFIG=str(keys),
            COURIER_MCP_CONFIG=str(config),
            COURIER_MCP_URL_ALLOW=url.split("/")[2],
            COURIER_ADMIN_API_KEY=ADMIN_KEY,
        )
        ready(server, {"toolbox", "gate", "web", "time"})
        yield server
        server.stop()  # before the HTTP toolbox it talks to


def status(server: Server) -> dict[str, dict[str, Any]]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = httpx.get(f"{server.base_url}/v1/mcp/servers", headers=admin, timeout=10)
    assert resp.status_code == 200, resp.text
    return {entry["name"]: entry for entry in resp.json()["data"]}


def ready(server: Server, names: set[str], tries: int = 1200) -> dict[str, dict[str, Any]]:
    for _ in range(tries):
        found = status(server)
        if all(found.get(n, {}).get("state") == "ready" and found[n]["tools"] for n in names):
            return found
        time.sleep(0.05)
    raise AssertionError(f"MCP servers never all ready: {status(server)}")


def chat(server: Server, text: str, session: str | None = None) -> httpx.Response:
    headers = server.headers(**({"X-Session-Id": session} if session else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp


def offered(sim: Simulator, index: int = 0) -> set[str]:
    body = json.loads(sim.requests()[index]["body"])
    return {tool["function"]["name"] for tool in body.get("tools", [])}


def test_stdio_http_and_third_party_tools_answer_the_model(
    mcp_server: Server, sim: Simulator
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("mcp__toolbox__echo", text="from stdio, with enough words to fence"),
                        call("mcp__web__echo", text="from http, with enough words to fence"),
                        call("mcp__time__get_current_time", timezone="UTC"),
                    ]
                }
            },
            {"reply": {"text": "done"}},
        ]
    )
    client = OpenAI(base_url=f"{mcp_server.base_url}/v1", api_key=mcp_server.api_key)
    answer = client.chat.completions.create(
        model="courier", messages=[{"role": "user", "content": "use the tools"}]
    )
    assert answer.choices[0].message.content == "done"
    names = offered(sim)
    assert {"mcp__toolbox__echo", "mcp__web__echo", "mcp__time__get_current_time"} <= names
    results = {r.split(">>>", 1)[0]: r for r in tool_results(sim)}
    stdio = results[OPEN + "toolbox/echo"]
    http = results[OPEN + "web/echo"]
    clock = results[OPEN + "time/get_current_time"]
    assert stdio.startswith(OPEN + "toolbox/echo>>>") and "toolbox echo: from stdio" in stdio
    assert http.startswith(OPEN + "web/echo>>>") and "toolbox echo: from http" in http
    assert clock.startswith(OPEN + "time/get_current_time>>>") and '"timezone": "UTC"' in clock
    body = json.loads(sim.requests()[0]["body"])
    assert "mcp__<server>__<tool>" in body["messages"][0]["content"]  # the stable tier's note
    assert "mcp__toolbox__echo" not in body["messages"][0]["content"]


def test_the_responses_api_gets_the_same_tools(mcp_server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__time__get_current_time", timezone="UTC")]}},
            {"reply": {"text": "it is now"}},
        ]
    )
    client = OpenAI(base_url=f"{mcp_server.base_url}/v1", api_key=mcp_server.api_key)
    response = client.responses.create(model="courier", input="what time is it?")
    assert response.output_text == "it is now"
    assert "mcp__time__get_current_time" in offered(sim)
    (clock,) = tool_results(sim)
    assert clock.startswith(OPEN + "time/get_current_time>>>") and '"UTC"' in clock


def test_a_stdio_server_environment_holds_no_secret(mcp_server: Server, sim: Simulator) -> None:
    sim.script(
        [{"reply": {"tool_calls": [call("mcp__toolbox__env_dump")]}}, {"reply": {"text": "ok"}}]
    )
    chat(mcp_server, "dump the environment")
    (result,) = tool_results(sim)
    dumped = json.loads(result.split("\n", 1)[1].rsplit("\n", 1)[0])
    for secret in (mcp_server.api_key, ADMIN_KEY, "sim-upstream-key", HEADER_SECRET):
        assert sha256(secret) not in dumped["hashes"]
    assert not [n for n in dumped["names"] if n.startswith("COURIER_") or "API_KEY" in n]
    assert dumped["home"] == str(mcp_server.data_dir / "mcp" / "toolbox" / "home")
    # What the file gives its server does reach it.
    assert "TOOLBOX_TOKEN" in dumped["names"] and sha256(ENV_SECRET) in dumped["hashes"]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_an_always_server_waits_for_a_human(mcp_server: Server, sim: Simulator) -> None:
    home = mcp_server.data_dir / "mcp" / "gate" / "home"
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__gate__write_note", text="denied one")]}},
            {"reply": {"text": "ok"}},
            {"reply": {"tool_calls": [call("mcp__gate__write_note", text="approved one")]}},
            {"reply": {"text": "ok"}},
        ]
    )
    turn = BackgroundTurn(mcp_server, "write a note").start()
    [approval] = pending(mcp_server)
    assert approval["tool"] == "mcp__gate__write_note" and approval["grantable"] is False
    assert "denied one" in approval["summary"]
    assert decide(mcp_server, approval["id"], "session").status_code == 403
    assert decide(mcp_server, approval["id"], "deny").status_code == 200
    turn.join()
    assert "denied" in tool_results(sim)[0] and "write_note" not in toolbox_counts(home)
    turn = BackgroundTurn(mcp_server, "write a note").start()
    [approval] = pending(mcp_server)
    assert decide(mcp_server, approval["id"], "once").status_code == 200
    turn.join()
    assert "noted: approved one" in tool_results(sim)[0]
    assert toolbox_counts(home).get("write_note") == 1


def test_a_tool_added_by_list_changed_is_offered_next_turn_as_one_break(
    mcp_server: Server, sim: Simulator
) -> None:
    steps: list[dict[str, Any]] = [
        {"reply": {"tool_calls": [call("mcp__toolbox__grow")]}},
        {"reply": {"text": "grew"}},
    ]
    for _ in range(3):
        steps += [{"reply": {"text": "plain"}}]
    sim.script(steps)
    session = chat(mcp_server, "grow").headers["x-session-id"]
    assert "mcp__toolbox__grown" not in offered(sim, 0)
    for _ in range(1200):
        if any(t["name"] == "mcp__toolbox__grown" for t in status(mcp_server)["toolbox"]["tools"]):
            break
        time.sleep(0.05)
    assert status(mcp_server)["toolbox"]["list_changes"] == 1
    for n in range(3):
        chat(mcp_server, f"turn {n}", session)
    assert "mcp__toolbox__grown" in offered(sim, 2)
    usage = httpx.get(
        f"{mcp_server.base_url}/v1/sessions/{session}/usage",
        headers=mcp_server.headers(),
        timeout=10,
    ).json()
    breaks = [c["cache_break"] for c in usage["calls"] if c["cache_break"]]
    assert breaks == ["mcp_tools_changed"]


def test_a_crashed_server_is_reported_restarted_and_others_go_on(
    mcp_server: Server, sim: Simulator
) -> None:
    before = status(mcp_server)["toolbox"]["reconnects"]
    sim.script(
        [{"reply": {"tool_calls": [call("mcp__toolbox__crash")]}}, {"reply": {"text": "sorry"}}]
    )
    chat(mcp_server, "crash it")
    (result,) = tool_results(sim)
    assert "stopped during this call" in result
    sim.script([{"reply": {"text": "no tools needed"}}])
    chat(mcp_server, "another session, no MCP tool")
    servers = ready(mcp_server, {"toolbox"})
    assert servers["toolbox"]["reconnects"] == before + 1 and servers["toolbox"]["last_error"]
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__toolbox__echo", text="back again")]}},
            {"reply": {"text": "ok"}},
        ]
    )
    chat(mcp_server, "echo")
    assert "toolbox echo: back again" in tool_results(sim)[0]


def test_a_key_sees_only_the_servers_it_is_allowed(mcp_server: Server, sim: Simulator) -> None:
    home = mcp_server.data_dir / "mcp" / "toolbox" / "home"
    echoes = toolbox_counts(home).get("echo", 0)
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__toolbox__echo", text="hidden server")]}},
            {"reply": {"text": "ok"}},
        ]
    )
    resp = httpx.post(
        f"{mcp_server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "echo"}]},
        headers={"Authorization": f"Bearer {NARROW_KEY}"},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    names = offered(sim)
    assert "mcp__time__get_current_time" in names and "mcp__toolbox__echo" not in names
    (result,) = tool_results(sim)
    assert "unknown tool" in result.lower() or "no tool" in result.lower(), result
    assert toolbox_counts(home).get("echo", 0) == echoes  # the server was never called


def test_the_status_route_is_admin_only_and_shows_no_secret(mcp_server: Server) -> None:
    servers = status(mcp_server)
    text = json.dumps(servers)
    assert HEADER_SECRET not in text and ENV_SECRET not in text
    assert servers["web"]["header_names"] == ["Authorization"]
    assert servers["toolbox"]["env_names"] == ["TOOLBOX_TOKEN"]
    assert servers["time"]["command"] == "mcp-server-time"
    metrics = httpx.get(
        f"{mcp_server.base_url}/metrics",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    ).text
    assert 'courier_mcp_server_up{server="time"} 1.0' in metrics
    ok = servers["time"]["calls"]["ok"]
    assert f'courier_mcp_calls_total{{outcome="ok",server="time"}} {float(ok)}' in metrics
    route = f"{mcp_server.base_url}/v1/mcp/servers"
    assert httpx.get(route, timeout=10).status_code == 401
    assert httpx.get(route, headers=mcp_server.headers(), timeout=10).status_code == 403


def test_mcp_calls_are_in_the_turns_route_by_server(mcp_server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("mcp__toolbox__echo", text="for the ledger"),
                        call("mcp__time__get_current_time", timezone="Not/AZone"),
                        call("mcp__time__get_current_time", timezone="UTC"),
                    ]
                }
            },
            {"reply": {"text": "counted"}},
        ]
    )
    session = chat(mcp_server, "call three").headers["x-session-id"]
    turns = httpx.get(
        f"{mcp_server.base_url}/v1/sessions/{session}/turns",
        headers=mcp_server.headers(),
        timeout=10,
    ).json()
    (turn,) = turns["data"]
    servers = turn["mcp"]["servers"]
    assert turn["mcp"]["calls"] == 3
    assert {name: s["calls"] for name, s in servers.items()} == {"toolbox": 1, "time": 2}
    assert servers["toolbox"]["errors"] == 0
    assert servers["time"]["errors"] == 1  # the zone it does not know
