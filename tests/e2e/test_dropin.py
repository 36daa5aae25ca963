"""Drop-in behaviour over HTTP: client tools, any last message, continuity, structured
output, field fates, retry safety, CORS, relay profiles and images (issue 9)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

END_CALL = {
    "type": "function",
    "function": {
        "name": "end_call",
        "description": "Hang up.",
        "parameters": {
            "type": "object",
            "properties": {"reason": {"type": "string"}},
            "required": ["reason"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
LOOKUP = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


def _post(server: Server, body: dict[str, Any], **headers: str) -> httpx.Response:
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", **body},
        headers=server.headers(**headers),
        timeout=30,
    )
    if resp.status_code >= 500 or resp.status_code == 429:
        print(resp.status_code, resp.headers, resp.text)  # shown when a test fails
    return resp


def _stream(
    server: Server, body: dict[str, Any], **headers: str
) -> tuple[httpx.Headers, list[Any]]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "stream": True, **body},
        headers=server.headers(**headers),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200, resp.read()
        data = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
        assert data[-1] == "[DONE]"
        return resp.headers, [json.loads(d) for d in data[:-1]]


def _upstream(sim: Simulator, index: int = -1) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(sim.requests()[index]["body"])
    return body


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


# ---------------------------------------------------------------- client tools


def test_client_tool_call_streams_per_clients_md_and_the_result_continues(
    server: Server, sim: Simulator
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "text": "One moment.",
                    "tool_calls": [
                        {"name": "end_call", "arguments": {"reason": "done"}, "id": "call_x1"}
                    ],
                }
            },
            {"expect": {"last_tool_result_contains": "hung up"}, "reply": {"text": "Bye!"}},
        ]
    )
    history = [_user("please hang up")]
    headers, chunks = _stream(server, {"messages": history, "tools": [END_CALL]})
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"] for d in deltas if "tool_calls" in d]
    assert calls[0] == [
        {
            "index": 0,
            "id": "call_x1",
            "type": "function",
            "function": {"name": "end_call", "arguments": ""},
        }
    ]
    assert all("id" not in c[0] and "name" not in c[0]["function"] for c in calls[1:])
    assert "".join(c[0]["function"]["arguments"] for c in calls) == '{"reason":"done"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "One moment."

    # The client ran the tool and sends its result, without any session id.
    history += [
        {
            "role": "assistant",
            "content": text,
            "tool_calls": [
                {
                    "id": "call_x1",
                    "type": "function",
                    "function": {"name": "end_call", "arguments": '{"reason": "done"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_x1", "content": "hung up"},
    ]
    resp = _post(server, {"messages": history, "tools": [END_CALL]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Bye!"
    assert resp.headers["x-session-id"] == headers["x-session-id"]
    sim.assert_script_done()


def test_mixed_batch_runs_the_server_call_and_returns_only_the_client_call(
    server: Server, sim: Simulator
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        {"name": "list_files", "arguments": {"path": "."}, "id": "call_s"},
                        {"name": "lookup", "arguments": {}, "id": "call_c"},
                    ]
                }
            },
            {"reply": {"text": "Both done."}},
        ]
    )
    resp = _post(server, {"messages": [_user("go")], "tools": [LOOKUP]})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["lookup"]
    sid = resp.headers["x-session-id"]
    resp = _post(
        server,
        {
            "messages": [
                {"role": "tool", "tool_call_id": "call_c", "content": "looked up: 42"},
            ],
            "tools": [LOOKUP],
        },
        **{"X-Session-Id": sid},
    )
    assert resp.status_code == 200, resp.text
    upstream = _upstream(sim)
    results = {m["tool_call_id"]: m["content"] for m in upstream["messages"] if m["role"] == "tool"}
    assert results["call_c"] == "looked up: 42"
    assert "call_s" in results and "error" not in results["call_s"][:6]
    names = [t["function"]["name"] for t in upstream["tools"]]
    assert "lookup" in names and "list_files" in names


def test_an_unknown_tool_result_is_a_400_naming_it(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "hi"}}])
    sid = _post(server, {"messages": [_user("hello")]}).headers["x-session-id"]
    resp = _post(
        server,
        {"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]},
        **{"X-Session-Id": sid},
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "messages[0].tool_call_id"


def test_tool_choice_and_parallel_calls_reach_the_upstream(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"tool_calls": [{"name": "end_call", "arguments": {"reason": "x"}}]}}])
    body = {
        "messages": [_user("bye")],
        "tools": [END_CALL],
        "tool_choice": {"type": "function", "function": {"name": "end_call"}},
        "parallel_tool_calls": False,
    }
    resp = _post(server, body)
    assert resp.status_code == 200, resp.text
    upstream = _upstream(sim)
    assert upstream["tool_choice"] == {"type": "function", "function": {"name": "end_call"}}
    assert upstream["parallel_tool_calls"] is False


def test_a_changed_client_tool_set_is_a_named_cache_break(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a1"}}, {"reply": {"text": "a2"}}])
    first = _post(server, {"messages": [_user("tools one")], "tools": [END_CALL]})
    sid = first.headers["x-session-id"]
    history = [_user("tools one"), {"role": "assistant", "content": "a1"}, _user("tools two")]
    second = _post(server, {"messages": history, "tools": [END_CALL, LOOKUP]})
    assert second.headers["x-session-id"] == sid
    ledger = httpx.get(
        f"{server.base_url}/v1/sessions/{sid}/usage", headers=server.headers()
    ).json()
    assert [c["cache_break"] for c in ledger["calls"]] == [None, "client_tools_changed"]


# ---------------------------------------------------------------- any last message


def test_greeting_and_trailing_instruction_on_the_openai_wire(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "Hello there!"}}, {"reply": {"text": "Goodbye."}}])
    headers, chunks = _stream(server, {"messages": [{"role": "system", "content": "Greet."}]})
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello there!"
    assert [m["role"] for m in _upstream(sim)["messages"]] == ["system"]
    history = [
        {"role": "system", "content": "Greet."},
        {"role": "assistant", "content": "Hello there!"},
        {"role": "system", "content": "Say goodbye now."},
    ]
    headers2, _ = _stream(server, {"messages": history})
    assert headers2["x-session-id"] == headers["x-session-id"]
    messages = _upstream(sim)["messages"]
    assert messages[-1] == {"role": "system", "content": "Say goodbye now."}
    assert messages[-2]["role"] == "assistant"


@pytest.fixture(scope="module")
def claude(module_servers: ServerFactory) -> Server:
    return module_servers("anthropic")


def test_greeting_instruction_and_prefill_on_the_anthropic_wire(
    claude: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "Hi!"}}, {"reply": {"text": " world"}}])
    resp = _post(claude, {"messages": [{"role": "system", "content": "Greet the caller."}]})
    assert resp.status_code == 200, resp.text
    first = _upstream(sim)["messages"][0]
    assert first["role"] == "user" and "conversation starts" in first["content"][0]["text"]
    resp = _post(
        claude,
        {
            "messages": [
                _user("say hello"),
                {"role": "system", "content": "Be brief."},
                {"role": "assistant", "content": "Hello"},
            ]
        },
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == " world"
    messages = _upstream(sim)["messages"]
    assert messages[-1]["role"] == "assistant"
    assert [b["text"] for b in messages[-1]["content"]] == ["Hello"]
    texts = [b["text"] for b in messages[-2]["content"]]
    assert texts[0] == "say hello" and texts[1].endswith("Be brief.")


def test_prefill_is_refused_where_the_wire_cannot_continue(server: Server) -> None:
    resp = _post(server, {"messages": [_user("x"), {"role": "assistant", "content": "y"}]})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "prefill_unsupported"


# ---------------------------------------------------------------- continuity


def test_regenerate_retracts_the_diverged_answer(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "first answer"}},
            {"reply": {"text": "second answer"}},
            {"reply": {"text": "regenerated"}},
            {"reply": {"text": "next"}},
        ]
    )
    u1, u2 = _user("regen one"), _user("regen two")
    sid = _post(server, {"messages": [u1]}).headers["x-session-id"]
    a1 = {"role": "assistant", "content": "first answer"}
    assert _post(server, {"messages": [u1, a1, u2]}).headers["x-session-id"] == sid
    again = _post(server, {"messages": [u1, a1, u2]})  # the regenerate button
    assert again.headers["x-session-id"] == sid
    assert again.json()["choices"][0]["message"]["content"] == "regenerated"
    sent = [m.get("content") for m in _upstream(sim)["messages"]]
    assert "second answer" not in sent and sent[-1] == "regen two"
    a2 = {"role": "assistant", "content": "regenerated"}
    last = _post(server, {"messages": [u1, a1, u2, a2, _user("regen three")]})
    assert last.headers["x-session-id"] == sid
    sent = [m.get("content") for m in _upstream(sim)["messages"] if m["role"] != "system"]
    assert sent == ["regen one", "first answer", "regen two", "regenerated", "regen three"]


def test_identical_openings_of_two_users_never_merge(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "hello A"}},
            {"reply": {"text": "hello B"}},
            {"reply": {"text": "more"}},
        ]
    )
    a = _post(server, {"messages": [_user("hi there")], "user": "alice"})
    b = _post(server, {"messages": [_user("hi there")], "user": "bob"})
    assert a.headers["x-session-id"] != b.headers["x-session-id"]
    resent = [_user("hi there"), {"role": "assistant", "content": "hello A"}, _user("?")]
    c = _post(server, {"messages": resent, "user": "bob"})
    # Alice's answer resent under bob's name: bob's own conversation (diverged), never hers.
    assert c.headers["x-session-id"] == b.headers["x-session-id"]


# ---------------------------------------------------------------- structured output


SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    },
}


def test_structured_output_is_validated_and_repaired_once(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Sure! n is 3"}}, {"reply": {"text": '{"n": 3}'}}])
    resp = _post(server, {"messages": [_user("n?")], "response_format": SCHEMA})
    assert resp.status_code == 200, resp.text
    assert json.loads(resp.json()["choices"][0]["message"]["content"]) == {"n": 3}
    assert _upstream(sim, -2)["response_format"]["json_schema"]["name"] == "answer"
    sim.script([{"reply": {"text": "nope"}}, {"reply": {"text": '{"n": "x"}'}}])
    resp = _post(server, {"messages": [_user("n again?")], "response_format": SCHEMA})
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "invalid_output"


def test_unscripted_structured_answers_follow_the_schema(claude: Server, sim: Simulator) -> None:
    resp = _post(claude, {"messages": [_user("n?")], "response_format": SCHEMA})
    assert resp.status_code == 200, resp.text
    assert json.loads(resp.json()["choices"][0]["message"]["content"]) == {"n": 1}
    config = _upstream(sim)["output_config"]
    assert config["format"]["schema"] == SCHEMA["json_schema"]["schema"]  # type: ignore[index]


# ---------------------------------------------------------------- fields and retries


def test_fields_are_forwarded_or_named_as_ignored(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "ok"}}])
    body = {
        "messages": [_user("f")],
        "seed": 7,
        "presence_penalty": 0.5,
        "prompt_cache_key": "mine",
        "verbosity": "low",
        "user": "u1",
    }
    resp = _post(server, body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-courier-ignored"] == "prompt_cache_key, verbosity"
    upstream = _upstream(sim)
    assert (upstream["seed"], upstream["presence_penalty"], upstream["user"]) == (7, 0.5, "u1")


def test_seed_is_named_ignored_on_the_anthropic_wire(claude: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "ok"}}])
    resp = _post(claude, {"messages": [_user("s")], "seed": 7, "reasoning_effort": "low"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-courier-ignored"] == "seed"
    assert _upstream(sim)["output_config"] == {"effort": "low"}


def test_upstream_auth_failure_is_not_a_5xx_and_is_not_retried(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"fault": {"status": 401}}])
    resp = _post(server, {"messages": [_user("auth")]})
    assert resp.status_code == 403
    assert resp.headers["x-should-retry"] == "false"
    assert len(sim.requests("/v1/chat/completions")) == 1


def test_rate_limit_carries_retry_after(server: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 0}}] * 3)
    resp = _post(server, {"messages": [_user("rl")]})
    assert resp.status_code == 429
    assert resp.headers["x-should-retry"] == "true" and resp.headers["retry-after"] == "1"


def test_a_marked_sdk_retry_reattaches_instead_of_running_again(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "once"}}])
    body = {"messages": [_user("retry me")]}
    first = _post(server, body, **{"x-stainless-retry-count": "0"})
    again = _post(server, body, **{"x-stainless-retry-count": "1"})
    assert again.json()["id"] == first.json()["id"]
    assert len(sim.requests("/v1/chat/completions")) == 1


def test_a_cancelled_idempotent_turn_is_never_replayed_as_success(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"fault": {"delay_ms": 8000}, "reply": {"text": "late"}}])
    key = {"Idempotency-Key": "cancel-me-1"}
    body = {"model": "courier", "stream": True, "messages": [_user("slow")]}
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**key),
        timeout=30,
    ) as resp:
        next(resp.iter_lines())
    time.sleep(4.0)  # past the 3 s reattach grace: the turn is cancelled
    resp = _post(server, {"stream": True, "messages": [_user("slow")]}, **key)
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "turn_cancelled"
    assert resp.headers["x-should-retry"] == "false"


# ---------------------------------------------------------------- CORS, HEAD, relay


@pytest.fixture(scope="module")
def configured(
    module_servers: ServerFactory, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    config = tmp_path_factory.mktemp("configured") / "courier.toml"
    config.write_text(
        "[[profiles]]\n"
        'name = "tasks"\n'
        "relay = true\n"
        f'base_url = "{simulator.base_url}/v1"\n'
        'api_key = "sim-upstream-key"\n'
        'model = "gpt-4o-mini"\n'
        'aliases = ["gpt-4o-mini"]\n'
    )
    return module_servers(
        COURIER_CONFIG=str(config),
        COURIER_CORS_ORIGINS="https://cockpit.example",
        COURIER_MODEL_ALIASES="gpt-4.1",
    )


def test_cors_preflight_allowed_and_foreign_origin_refused(configured: Server) -> None:
    url = f"{configured.base_url}/v1/chat/completions"
    pre = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-session-id",
    }
    ok = httpx.options(url, headers={"Origin": "https://cockpit.example", **pre})
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "https://cockpit.example"
    assert "X-Session-Id" in ok.headers["access-control-allow-headers"]
    bad = httpx.options(url, headers={"Origin": "https://evil.example", **pre})
    assert bad.status_code == 403
    post = httpx.post(
        url, json={}, headers={"Origin": "https://evil.example", **configured.headers()}
    )
    assert post.status_code == 403 and post.json()["error"]["code"] == "origin_not_allowed"
    models = httpx.get(
        f"{configured.base_url}/v1/models",
        headers={"Origin": "https://cockpit.example", **configured.headers()},
    )
    assert "X-Session-Id" in models.headers["access-control-expose-headers"]


def test_head_where_get_exists(configured: Server) -> None:
    assert httpx.head(f"{configured.base_url}/health").status_code == 200
    resp = httpx.head(f"{configured.base_url}/v1/models", headers=configured.headers())
    assert resp.status_code == 200 and resp.content == b""


def test_relay_profile_and_aliases(configured: Server, sim: Simulator) -> None:
    listed = httpx.get(f"{configured.base_url}/v1/models", headers=configured.headers()).json()
    assert {"courier", "tasks", "gpt-4o-mini", "gpt-4.1"} <= {m["id"] for m in listed["data"]}
    sim.script([{"reply": {"text": "A title"}}])
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be terse."},
            _user("### Task: title this chat"),
        ],
    }
    resp = httpx.post(
        f"{configured.base_url}/v1/chat/completions",
        json=body,
        headers=configured.headers(),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "A title"
    upstream = _upstream(sim)
    assert "tools" not in upstream
    assert upstream["messages"][0] == {"role": "system", "content": "Be terse."}
    ledger = httpx.get(
        f"{configured.base_url}/v1/sessions/{resp.headers['x-session-id']}/usage",
        headers=configured.headers(),
    ).json()
    assert ledger["totals"]["upstream_calls"] >= 1


# ---------------------------------------------------------------- images


PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


def test_images_are_forwarded_and_replayed_byte_stably(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a dot"}}, {"reply": {"text": "still a dot"}}])
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    u1 = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}
    sid = _post(server, {"messages": [u1]}).headers["x-session-id"]
    first = _upstream(sim)["messages"][-1]
    assert first["content"][1] == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{PNG}"},
    }
    history = [u1, {"role": "assistant", "content": "a dot"}, _user("sure?")]
    assert _post(server, {"messages": history}).headers["x-session-id"] == sid
    assert _upstream(sim)["messages"][-3] == first


def test_image_urls_must_be_https_or_data(server: Server, tmp_path: Path) -> None:
    del tmp_path
    image = {"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}
    resp = _post(server, {"messages": [{"role": "user", "content": [image]}]})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages[0].content"
