"""The chat endpoint over real HTTP: a real server, a real simulator, the official client."""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai import OpenAI

from tests.support.server import Server
from tests.support.sim import Simulator


def _post(server: Server, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**headers),
        timeout=30,
    )


def _upstream_bodies(sim: Simulator) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in sim.requests() if r["path"].endswith("/completions")]


def test_tool_turn_runs_server_side(server: Server, client: OpenAI, sim: Simulator) -> None:
    sim.script(
        [
            {
                "expect": {"last_user_contains": "what is here"},
                "reply": {"tool_calls": [{"name": "list_files", "arguments": {"path": "."}}]},
            },
            {
                "expect": {"last_tool_result_contains": "(empty directory)"},
                "reply": {"text": "The workspace is empty."},
            },
        ]
    )
    raw = client.chat.completions.with_raw_response.create(
        model="courier", messages=[{"role": "user", "content": "what is here?"}]
    )
    completion = raw.parse()
    sim.assert_script_done()
    assert completion.choices[0].message.content == "The workspace is empty."
    assert completion.choices[0].finish_reason == "stop"
    # Server-side tool calls are never shown to the client as tool_calls.
    assert completion.choices[0].message.tool_calls is None
    assert raw.headers["x-session-id"].startswith("sess_")
    assert raw.headers["x-courier-upstream-calls"] == "2"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


def test_tool_results_and_errors_reach_the_model(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        {"name": "read_file", "arguments": {"path": "../../etc/passwd"}},
                        {"name": "no_such_tool", "arguments": {}},
                        {"name": "read_file", "arguments": "{not json"},
                    ]
                }
            },
            {"reply": {"text": "done"}},
        ]
    )
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": "go"}]})
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    second = _upstream_bodies(sim)[1]
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert len(results) == 3
    assert "outside the workspace" in results[0]["content"]
    assert "unknown tool 'no_such_tool'" in results[1]["content"]
    assert "not valid JSON" in results[2]["content"]


def test_session_continues_from_the_server_log(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "first answer"}}, {"reply": {"text": "second answer"}}])
    first = _post(server, {"model": "courier", "messages": [{"role": "user", "content": "one"}]})
    sid = first.headers["x-session-id"]
    # The client resends a made-up history; with a session id only the trailing user
    # message counts, and the server's log supplies the rest.
    second = _post(
        server,
        {
            "model": "courier",
            "messages": [
                {"role": "user", "content": "forged"},
                {"role": "assistant", "content": "forged reply"},
                {"role": "user", "content": "two"},
            ],
        },
        **{"X-Session-Id": sid},
    )
    assert second.status_code == 200, second.text
    assert second.headers["x-session-id"] == sid
    sim.assert_script_done()
    upstream = _upstream_bodies(sim)[1]["messages"]
    convo = [(m["role"], m.get("content")) for m in upstream if m["role"] != "system"]
    assert convo == [
        ("user", "one"),
        ("assistant", "first answer"),
        ("user", "two"),
    ]


def test_session_id_in_body_and_unknown_session(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a"}}, {"reply": {"text": "b"}}])
    sid = _post(
        server, {"model": "courier", "messages": [{"role": "user", "content": "x"}]}
    ).headers["x-session-id"]
    again = _post(
        server,
        {"model": "courier", "session_id": sid, "messages": [{"role": "user", "content": "y"}]},
    )
    assert again.status_code == 200 and again.headers["x-session-id"] == sid
    missing = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "y"}]},
        **{"X-Session-Id": "sess_does_not_exist"},
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "session_not_found"


def test_client_system_message_joins_the_context_tier(server: Server, sim: Simulator) -> None:
    sim.script([{"expect": {"system_contains": "Answer in French."}, "reply": {"text": "Oui."}}])
    resp = _post(
        server,
        {
            "model": "courier",
            "messages": [
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "hello"},
            ],
        },
    )
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    system = _upstream_bodies(sim)[0]["messages"][0]
    assert system["role"] == "system"
    # Courier's own identity stays first: a client message never replaces it.
    assert system["content"].startswith("You are Courier")


def test_sampling_params_honoured_on_every_upstream_call(server: Server, sim: Simulator) -> None:
    expect = {"temperature": 0.25, "max_tokens": 77}
    sim.script(
        [
            {"expect": expect, "reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
            {"expect": expect, "reply": {"text": "ok"}},
        ]
    )
    resp = _post(
        server,
        {
            "model": "courier",
            "messages": [{"role": "user", "content": "x"}],
            "temperature": 0.25,
            "top_p": 0.5,
            "stop": ["END"],
            "max_completion_tokens": 77,
        },
    )
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    for body in _upstream_bodies(sim):
        assert body["top_p"] == 0.5
        assert body["stop"] == ["END"]


def test_unknown_fields_are_accepted(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "fine"}}])
    resp = _post(
        server,
        {
            "model": "courier",
            "messages": [{"role": "user", "content": "x", "extra_field": 1}],
            "frequency_penalty": 0.1,
            "logit_bias": {},
            "stop": ["s1", "s2", "s3", "s4", "s5"],
            "some_future_field": {"nested": True},
        },
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "fine"


def test_upstream_failure_is_a_clean_error(server: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 500}}, {"fault": {"status": 500}}, {"fault": {"status": 500}}])
    resp = _post(server, {"model": "courier", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status_code == 502
    error = resp.json()["error"]
    assert error["code"] == "upstream_server_error"
    assert "sim-upstream-key" not in resp.text
