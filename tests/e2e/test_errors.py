"""Hostile and malformed requests get clear OpenAI-shaped errors and lose nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support.server import Server
from tests.support.sim import Simulator

URL = "/v1/chat/completions"
GOOD = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}


def _post(server: Server, body: Any, *, headers: dict[str, str] | None = None) -> httpx.Response:
    hdrs = server.headers() if headers is None else headers
    kwargs: dict[str, Any] = {"content": body} if isinstance(body, (bytes, str)) else {"json": body}
    return httpx.post(f"{server.base_url}{URL}", headers=hdrs, timeout=30, **kwargs)


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key-wrong-key-wrong"},
        {"Authorization": "Basic dGVzdA=="},
        {"Authorization": "Bearer"},
    ],
)
def test_auth_required(server: Server, headers: dict[str, str]) -> None:
    error = _error(_post(server, GOOD, headers=headers), 401)
    assert error["type"] == "authentication_error"
    assert _error(httpx.get(f"{server.base_url}/v1/models", headers=headers), 401)


def test_health_needs_no_auth(server: Server) -> None:
    assert httpx.get(f"{server.base_url}/health").json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "courier"}, "messages"),
        ({"model": "courier", "messages": []}, "messages"),
        (
            {"model": "courier", "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
        ),
        ({**GOOD, "temperature": 7}, "temperature"),
        ({**GOOD, "top_p": "high"}, "top_p"),
        ({**GOOD, "max_tokens": 0}, "max_tokens"),
        ({**GOOD, "n": 2}, "n"),
        (
            {**GOOD, "tools": [{"type": "function", "function": {"name": "f g"}}]},
            "tools[0].function.name",
        ),
        ({**GOOD, "logprobs": True}, "logprobs"),
        ({**GOOD, "modalities": ["text", "audio"]}, "modalities"),
        ({**GOOD, "functions": [{"name": "f"}]}, "functions"),
        (
            {**GOOD, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        (
            {**GOOD, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema",
        ),
        ({**GOOD, "stream": "yes please"}, "stream"),
        ({"model": "courier", "messages": [{"role": "assistant", "content": "x"}]}, "messages[0]"),
        (
            {
                "model": "courier",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "http://x"}}],
                    }
                ],
            },
            "messages[0].content",
        ),
    ],
)
def test_bad_requests_are_400_with_param(server: Server, body: Any, param: str | None) -> None:
    error = _error(_post(server, body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_unknown_model_is_404(server: Server, client: OpenAI) -> None:
    error = _error(_post(server, {**GOOD, "model": "gpt-nope"}), 404)
    assert error["code"] == "model_not_found" and error["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-nope")


def test_body_over_limit_is_413(server: Server) -> None:
    big = b'{"model":"courier","messages":[{"role":"user","content":"' + b"a" * (11 * 1024 * 1024)
    error = _error(_post(server, big + b'"}]}'), 413)
    assert error["code"] == "request_too_large"


def test_chunked_body_over_limit_is_413(server: Server) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model":"courier","messages":[{"role":"user","content":"'
        for _ in range(12):
            yield b"a" * (1024 * 1024)
        yield b'"}]}'

    resp = httpx.post(
        f"{server.base_url}{URL}", headers=server.headers(), content=chunks(), timeout=30
    )
    _error(resp, 413)


def test_unknown_route_is_openai_shaped(server: Server) -> None:
    _error(httpx.get(f"{server.base_url}/v1/nothing", headers=server.headers()), 404)


@pytest.mark.parametrize("path", [URL, "/v1/responses"])
def test_turn_routes_answer_other_methods_and_bad_keys_in_shape(server: Server, path: str) -> None:
    # The turn routes are `DirectRoute`s (no FastAPI request handler): routing, the 405
    # and the key check before the body is read must be what every other route gives.
    wrong = httpx.get(f"{server.base_url}{path}", headers=server.headers())
    _error(wrong, 405)
    assert wrong.headers["allow"] == "POST"
    unread = httpx.post(f"{server.base_url}{path}", content=b"[not json", timeout=30)
    assert _error(unread, 401)["type"] == "authentication_error"


def test_models_listing(client: OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == ["courier"]
    assert client.models.retrieve("courier").id == "courier"


def test_bad_request_loses_nothing_stored(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "kept"}}, {"reply": {"text": "still here"}}])
    first = _post(server, GOOD)
    sid = first.headers["x-session-id"]
    bad = _post(server, {**GOOD, "temperature": 9}, headers=server.headers(**{"X-Session-Id": sid}))
    _error(bad, 400)
    ok = _post(
        server,
        {**GOOD, "messages": [{"role": "user", "content": "again"}]},
        headers=server.headers(**{"X-Session-Id": sid}),
    )
    assert ok.status_code == 200
    sim.assert_script_done()
    bodies = [r for r in sim.requests() if r["path"].endswith("/completions")]
    assert '"kept"' in bodies[-1]["body"]
