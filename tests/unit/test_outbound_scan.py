"""The last line before the upstream: a body carrying a server secret is never sent."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable

import httpx
import orjson
import pytest

from app.providers.anthropic import AnthropicProvider, encode_messages_body
from app.providers.base import Message, ModelRequest, UserMessage
from app.providers.openai_chat import OpenAIChatProvider, encode_chat_body
from app.security.outbound import (
    MIN_SECRET_BYTES,
    NO_SCAN,
    OutboundScan,
    SecretInRequest,
)

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


# ---------------------------------------------------- what is new is searched, once (issue 30)

SPLIT_SECRET = 'ends-one"},{"role":"user","content":"starts-two'
"""Shows only where two messages meet: the first's text ends, the second's begins."""


def _long(messages: tuple[Message, ...], session: str) -> ModelRequest:
    return ModelRequest(model="m", system=(), messages=messages, prompt_cache_key=session)


WIRES: list[Callable[[ModelRequest, OutboundScan], bytes]] = [
    lambda request, scan: encode_chat_body(request, scan=scan),
    lambda request, scan: encode_messages_body(request, scan=scan),
]


@pytest.mark.parametrize("wire", WIRES, ids=["openai", "anthropic"])
def test_a_secret_in_a_kept_fragment_is_refused_on_every_call(
    scan: OutboundScan, wire: Callable[[ModelRequest, OutboundScan], bytes]
) -> None:
    session = secrets.token_hex(8)
    history = tuple(UserMessage(f"note {n}") for n in range(40))
    leaked = (*history, UserMessage(f"the key: {SECRET}"))
    wire(_long(history, session), scan)  # kept, clean
    for _ in range(3):  # refused, then again though its encoding could be reused
        with pytest.raises(SecretInRequest):
            wire(_long(leaked, session), scan)
    with pytest.raises(SecretInRequest):
        wire(_long((*leaked, UserMessage("and more")), session), scan)


@pytest.mark.parametrize("wire", WIRES, ids=["openai", "anthropic"])
def test_fragments_kept_under_another_scan_are_searched_again(
    scan: OutboundScan, wire: Callable[[ModelRequest, OutboundScan], bytes]
) -> None:
    # The same conversation encoded first where nothing is searched (a benchmark, another
    # app in the process), then by the server's scan: the kept bytes were never searched.
    session = secrets.token_hex(8)
    messages = tuple(UserMessage(f"note {n} {SECRET}") for n in range(40))
    wire(_long(messages, session), NO_SCAN)
    with pytest.raises(SecretInRequest):
        wire(_long(messages, session), scan)


def test_a_secret_completed_by_the_join_between_messages_is_refused() -> None:
    scan = OutboundScan([SPLIT_SECRET])
    session = secrets.token_hex(8)
    first, second = UserMessage("... ends-one"), UserMessage("starts-two ...")
    body = encode_chat_body(_long((first,), session), scan=scan)  # alone, each is clean
    assert SPLIT_SECRET.encode() not in body
    with pytest.raises(SecretInRequest):
        encode_chat_body(_long((first, second), session), scan=scan)


def test_the_pieces_search_finds_what_the_whole_search_finds(scan: OutboundScan) -> None:
    for body in (
        orjson.dumps({"content": f"x{SECRET}y"}),
        orjson.dumps({"content": UNICODE_SECRET}),
        base64.b64encode(b"..." + SECRET.encode()),
        orjson.dumps({"content": "nothing here"}),
    ):
        whole = _held(scan, body)
        try:
            scan.check_pieces([b"{}", body])
            scan.check_joined(body)
            pieces = False
        except SecretInRequest:
            pieces = True
        assert pieces == whole
