"""The last line before the upstream: a body carrying a server secret is never sent."""

from __future__ import annotations

import base64
import json
import secrets

import httpx
import orjson
import pytest

from app.providers.anthropic import AnthropicProvider
from app.providers.base import ModelRequest, UserMessage
from app.providers.openai_chat import OpenAIChatProvider
from app.security.outbound import MIN_SECRET_BYTES, OutboundScan, SecretInRequest

SECRET = "sk-courier-" + secrets.token_urlsafe(32)
UNICODE_SECRET = 'pässwört-"quoted"-ключ-0123'


def _held(scan: OutboundScan, body: bytes) -> bool:
    try:
        scan.check(body)
    except SecretInRequest:
        return True
    return False


@pytest.fixture(params=["find", "automaton"])
def scan(request: pytest.FixtureRequest) -> OutboundScan:
    """Both searches: a find per form for a few secrets, RE2 past `FIND_LIMIT` forms."""
    more = [secrets.token_urlsafe(24) for _ in range(8)] if request.param == "automaton" else []
    built = OutboundScan([SECRET, UNICODE_SECRET, "short", *more])
    assert (built._compiled is not None) == (request.param == "automaton")
    return built


def test_the_secret_raw_and_json_escaped(scan: OutboundScan) -> None:
    assert _held(scan, orjson.dumps({"content": f"the key is {SECRET}."}))
    for text in (UNICODE_SECRET, f"x{UNICODE_SECRET}y"):
        assert _held(scan, orjson.dumps({"content": text}))
        assert _held(scan, json.dumps({"content": text}, ensure_ascii=True).encode())


@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
@pytest.mark.parametrize("before", range(6))
def test_base64_at_every_alignment(scan: OutboundScan, encode: object, before: int) -> None:
    assert callable(encode)
    for secret in (SECRET, UNICODE_SECRET):
        stream = secrets.token_bytes(before) + secret.encode() + secrets.token_bytes(4)
        encoded = encode(stream)
        assert isinstance(encoded, bytes)
        assert _held(scan, orjson.dumps({"content": encoded.decode()}))


def test_ordinary_text_and_short_values_pass(scan: OutboundScan) -> None:
    assert len(b"short") < MIN_SECRET_BYTES
    assert not _held(scan, orjson.dumps({"content": "a short note, in short: short"}))
    assert not _held(scan, orjson.dumps({"content": SECRET[:-2]}))
    assert not _held(scan, base64.b64encode(secrets.token_bytes(1 << 20)))
    assert not _held(OutboundScan(()), SECRET.encode())


def _request() -> ModelRequest:
    return ModelRequest(
        model="m", system=(), messages=(UserMessage(f"please use {SECRET} for me"),)
    )


async def test_neither_wire_sends_the_body(scan: OutboundScan) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    provider = OpenAIChatProvider("http://127.0.0.1:9/v1", "k", http_client=client, outbound=scan)
    with pytest.raises(SecretInRequest):
        async for _ in provider.stream(_request()):
            pass
    anthropic = AnthropicProvider("http://127.0.0.1:9", "k", outbound=scan)
    with pytest.raises(SecretInRequest):
        async for _ in anthropic.stream(_request()):
            pass
    await client.aclose()
    await anthropic.aclose()
    assert sent == []
