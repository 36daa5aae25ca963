"""The client snippets in docs/clients.md (the README's "Clients" section points there) run.

Each snippet is extracted by its `<!-- snippet: NAME -->` marker and executed for real: the
Python ones in a fresh interpreter, the Node one with `node` from tests/node (where the
pinned SDK is installed), against a live server whose upstream (the simulator) is scripted,
so the printed answer is known. The snippets' `http://127.0.0.1:8642` becomes the test
server's URL; nothing else is changed. LiveKit and Pipecat are too heavy to install here
(livekit-agents, pipecat-ai pull in media stacks): their snippets are syntax-checked, and
the requests those frameworks really send are replayed by tests/test_compat_captured.py.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import REPO_ROOT, Simulator

DOC = REPO_ROOT / "docs" / "clients.md"
NODE_DIR = REPO_ROOT / "tests" / "node"
CAPTURES = REPO_ROOT / "tests" / "fixtures" / "captured-requests.jsonl"
DOC_URL = "http://127.0.0.1:8642"
_SNIPPET = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.S)


def snippets() -> dict[str, tuple[str, str]]:
    return {name: (lang, code) for name, lang, code in _SNIPPET.findall(DOC.read_text())}


@pytest.fixture
def server(compat_servers: dict[str, Server]) -> Server:
    return compat_servers["openai"]


def _code(name: str, server: Server) -> str:
    return snippets()[name][1].replace(DOC_URL, server.base_url)


def _run(command: list[str], code: str, server: Server, cwd: Path = REPO_ROOT) -> str:
    env = {**os.environ, "COURIER_API_KEY": server.api_key}
    # Belt and braces: a snippet must never reach a real vendor from the test machine.
    env.update({"OPENAI_API_KEY": "unused", "LANGSMITH_TRACING": "false"})
    done = subprocess.run(
        command, input=code, cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"snippet failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _python(name: str, server: Server) -> str:
    return _run([sys.executable, "-"], _code(name, server), server)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"reply": {"tool_calls": [{"name": name, "arguments": arguments}]}}


def test_openai_python(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Two files."}}, {"reply": {"text": "Two files, both notes."}}])
    out = _python("openai-python", server)
    assert out.splitlines() == ["Two files.", "Two files, both notes."]
    sim.assert_script_done()


def test_openai_python_tools(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            _call("get_weather", city="Paris"),
            {
                "expect": {"last_tool_result_contains": "sunny, 21 C in Paris"},
                "reply": {"text": "Sunny and 21 C."},
            },
        ]
    )
    assert _python("openai-python-tools", server).strip() == "Sunny and 21 C."
    sim.assert_script_done()


def test_openai_node(server: Server, sim: Simulator) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the Node snippet did not run")
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.skip("the openai Node SDK is not installed: run `make node-deps`")
    sim.script([{"reply": {"text": "Hello from Node."}}])
    code = _code("openai-node", server)
    # Module code on stdin resolves `openai` from the working directory's node_modules.
    out = _run(["node", "--input-type=module", "-"], code, server, cwd=NODE_DIR)
    assert out.strip() == "Hello from Node."
    sim.assert_script_done()


def test_openai_agents(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            _call("get_weather", city="Paris"),
            {
                "expect": {"last_tool_result_contains": "sunny, 21 C in Paris"},
                "reply": {"text": "Sunny in Paris."},
            },
        ]
    )
    assert _python("openai-agents", server).strip() == "Sunny in Paris."
    first = json.loads(sim.requests()[0]["body"])
    assert "Be brief." in json.dumps(first["messages"])
    sim.assert_script_done()


def test_langchain(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "Hello from LangChain."}},
            {"reply": {"text": '{"city":"Paris","temperature_c":21.5}'}},
        ]
    )
    out = _python("langchain", server).splitlines()
    assert out == ["Hello from LangChain.", "city='Paris' temperature_c=21.5"]
    # The scripted JSON would parse even if the schema were dropped: check it went upstream.
    structured = json.loads(sim.requests()[1]["body"])
    assert structured.get("response_format", {}).get("type") == "json_schema", structured
    sim.assert_script_done()


@pytest.mark.parametrize(("name", "client"), [("livekit", "livekit"), ("pipecat", "pipecat")])
def test_voice_framework_snippets(name: str, client: str) -> None:
    code = snippets()[name][1]
    ast.parse(code)
    assert f'base_url="{DOC_URL}/v1"' in code and 'model="courier"' in code
    # Their real traffic is replayed line by line by the compatibility suite.
    clients = {json.loads(line)["client"] for line in CAPTURES.read_text().splitlines()}
    assert any(c.startswith(client) for c in clients)


def _toml(profiles: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for profile in profiles:
        lines.append("[[profiles]]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in profile.items()]
        lines.append("")
    return "\n".join(lines)


@pytest.fixture
def relay_server(
    servers: ServerFactory, simulator: Simulator, tmp_path: Path
) -> tuple[Server, dict[str, Any]]:
    config = tomllib.loads(snippets()["courier-toml"][1])
    for profile in config["profiles"]:
        openai_wire = profile.get("provider", "openai") == "openai"
        profile["base_url"] = f"{simulator.base_url}/v1" if openai_wire else simulator.base_url
        profile["api_key"] = "sim-upstream-key"
    path = tmp_path / "courier.toml"
    path.write_text(_toml(config["profiles"]))
    try:
        srv = servers(COURIER_CONFIG=str(path))
    except RuntimeError as exc:
        pytest.fail(f"the server refused the documented courier.toml:\n{str(exc)[-1500:]}")
    return srv, config


def test_open_webui_task_model_and_aliases(
    relay_server: tuple[Server, dict[str, Any]], sim: Simulator
) -> None:
    server, config = relay_server
    env = dict(
        line.split("=", 1)
        for line in snippets()["open-webui-env"][1].splitlines()
        if line and not line.startswith("#")
    )
    assert env["OPENAI_API_BASE_URL"] == f"{DOC_URL}/v1"
    listed = httpx.get(f"{server.base_url}/v1/models", headers=server.headers()).json()
    ids = {m["id"] for m in listed["data"]}
    names = {p["name"] for p in config["profiles"]}
    aliases = {a for p in config["profiles"] for a in p.get("aliases", [])}
    assert {"courier", env["TASK_MODEL_EXTERNAL"]} | names | aliases <= ids

    sim.script([{"reply": {"text": '{"title": "Weather chat"}'}}])
    task = {"role": "user", "content": "### Task:\nGenerate a concise title..."}
    answer = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": env["TASK_MODEL_EXTERNAL"], "messages": [task], "stream": True},
        headers=server.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    upstream = json.loads(sim.requests()[-1]["body"])
    assert not upstream.get("tools"), "a relay profile offers the model no tools"
    assert len(sim.requests()) == 1

    sim.script([{"reply": {"text": "Served by an alias."}}])
    alias = sorted(aliases)[0]
    answer = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": alias, "messages": [{"role": "user", "content": "hi"}]},
        headers=server.headers(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "Served by an alias."


def test_open_webui_users_and_chats_are_kept_apart(sim: Simulator, servers: ServerFactory) -> None:
    """The documented Courier settings, with the headers Open WebUI forwards: each user's
    chats are listed under them, and a chat id names one session."""
    env = dict(line.split("=", 1) for line in snippets()["courier-end-users-env"][1].splitlines())
    server = servers(**env)

    def ask(user: str, chat: str, messages: list[dict[str, str]]) -> str:
        sim.script([{"reply": {"text": "hello"}}])
        headers = server.headers(**{"X-OpenWebUI-User-Id": user, "X-OpenWebUI-Chat-Id": chat})
        answer = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "courier", "messages": messages},
            headers=headers,
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        return answer.headers["x-session-id"]

    hi = [{"role": "user", "content": "hi"}]
    mine, theirs = ask("u-1", "c-1", hi), ask("u-2", "c-2", hi)
    assert ask("u-1", "c-1", hi) == mine  # a regenerated first answer: the same chat
    for user, session in (("u-1", mine), ("u-2", theirs)):
        listed = httpx.get(
            f"{server.base_url}/v1/sessions",
            headers=server.headers(**{"X-OpenWebUI-User-Id": user}),
        ).json()["data"]
        assert [s["id"] for s in listed] == [session]


_FIELDS = re.compile(r"<!-- fields -->\n(.*?)\n<!-- /fields -->", re.S)
FATES = {"honoured", "passed", "mapped", "ignored", "refused"}


def field_rows() -> list[tuple[str, Any, str, str]]:
    """(field, example value, OpenAI-wire fate, Anthropic-wire fate) from the table."""
    table = _FIELDS.search(DOC.read_text())
    assert table is not None, "docs/clients.md has no request-field table"
    rows = []
    for line in table.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        field, example, openai_fate, anthropic_fate = cells[0].strip("`"), cells[1], *cells[2:4]
        assert {openai_fate, anthropic_fate} <= FATES, line
        rows.append((field, json.loads(example.strip("`")), openai_fate, anthropic_fate))
    return rows


def refused_param(field: str) -> str:
    r"""The `param` a refusal names: the field, unless the notes say `param \`X\``."""
    table = _FIELDS.search(DOC.read_text())
    assert table is not None
    for line in table.group(1).splitlines():
        if line.startswith(f"| `{field}` |"):
            named = re.search(r"param `([\w.\[\]]+)`", line.split("|")[5])
            return named.group(1) if named else field
    raise KeyError(field)


@pytest.fixture
def wire_servers(compat_servers: dict[str, Server]) -> dict[str, Server]:
    return compat_servers


def _field_cases() -> list[Any]:
    cases = []
    for field, example, openai_fate, anthropic_fate in field_rows():
        for wire, fate in (("openai", openai_fate), ("anthropic", anthropic_fate)):
            cases.append(pytest.param(field, example, wire, fate, id=f"{field}-{wire}-{fate}"))
    return cases


@pytest.mark.parametrize(("field", "example", "wire", "fate"), _field_cases())
def test_request_field_fate(
    wire_servers: dict[str, Server],
    sim: Simulator,
    field: str,
    example: Any,
    wire: str,
    fate: str,
) -> None:
    server = wire_servers[wire]
    sim.script([{"reply": {"text": '{"answer": "ok"}'}}])
    body = {"model": "courier", "messages": [{"role": "user", "content": "hi"}], field: example}
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers(), timeout=60
    )
    ignored = {name.strip() for name in response.headers.get("x-courier-ignored", "").split(",")}
    if fate == "refused":
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == refused_param(field)
        assert sim.requests() == [], "a refused request must not reach the upstream"
        return
    assert response.status_code == 200, response.text
    if fate == "ignored":
        assert field in ignored, f"X-Courier-Ignored: {sorted(ignored)}"
        return
    assert field not in ignored, "a field the table says is used is reported ignored"
    if fate == "passed":
        sent = json.loads(sim.requests()[-1]["body"])
        assert sent.get(field) == example, f"{field} not passed upstream: {sorted(sent)}"
