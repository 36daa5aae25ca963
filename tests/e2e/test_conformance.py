"""Conformance: every body and chunk the live server emits validates against the official
OpenAI spec, and the official client parses all of it with strict validation on."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support.server import Server
from tests.support.sim import Simulator
from tests.support.spec import validate

BODY: dict[str, Any] = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}
TOOL_TURN = [
    {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
    {"reply": {"text": "All done here."}},
]


def _chunks(server: Server, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={**body, "stream": True},
        headers=server.headers(),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        data = [ln[6:] for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_json_completion_matches_spec(server: Server, client: OpenAI, sim: Simulator) -> None:
    sim.script(TOOL_TURN)
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=BODY, headers=server.headers(), timeout=30
    )
    validate("CreateChatCompletionResponse", resp.json())
    validate("CompletionUsage", resp.json()["usage"])
    sim.script(TOOL_TURN)
    completion = client.chat.completions.create(**BODY)
    assert completion.choices[0].message.content == "All done here."


@pytest.mark.parametrize("include_usage", [False, True])
def test_stream_chunks_match_spec(server: Server, sim: Simulator, include_usage: bool) -> None:
    sim.script(TOOL_TURN)
    body = {**BODY, "stream_options": {"include_usage": include_usage}}
    chunks = _chunks(server, body)
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk)
    if include_usage:
        validate("CompletionUsage", chunks[-1]["usage"])


def test_strict_client_stream_with_usage(client: OpenAI, sim: Simulator) -> None:
    sim.script(TOOL_TURN)
    stream = client.chat.completions.create(
        **BODY, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "All done here."
    )


def test_error_bodies_match_spec(server: Server, client: OpenAI) -> None:
    url = f"{server.base_url}/v1/chat/completions"
    cases = [
        (httpx.post(url, json={**BODY, "n": 3}, headers=server.headers()), 400),
        (httpx.post(url, json=BODY, headers={"Authorization": "Bearer nope-nope-nope-nope"}), 401),
        (httpx.post(url, json={**BODY, "model": "nope"}, headers=server.headers()), 404),
        (
            httpx.post(
                url, content=b"x" * (10 * 1024 * 1024 + 1), headers=server.headers(), timeout=30
            ),
            413,
        ),
    ]
    for resp, status in cases:
        assert resp.status_code == status
        validate("ErrorResponse", resp.json())
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(**BODY, n=2)
    assert bad.value.param == "n"  # type: ignore[attr-defined]
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=client.base_url, api_key="wrong-key-wrong-key", max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(**{**BODY, "model": "nope"})


def test_models_match_spec(server: Server, client: OpenAI) -> None:
    listing = httpx.get(f"{server.base_url}/v1/models", headers=server.headers()).json()
    validate("ListModelsResponse", listing)
    one = httpx.get(f"{server.base_url}/v1/models/courier", headers=server.headers()).json()
    validate("Model", one)
    assert [m.id for m in client.models.list().data] == ["courier"]
