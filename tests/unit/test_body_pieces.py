"""The chat wire's upstream body as pieces: their concatenation is the full encode, a
long fragment is a piece of its own (never copied into a joined body), and a secret that
only the join between pieces completes is still refused."""

from __future__ import annotations

import secrets

import pytest

from app.providers.base import Message, ModelRequest, ToolResultMessage, UserMessage
from app.providers.openai_chat import (
    SPLICED_APART,
    build_chat_body,
    encode_body,
    encode_chat_pieces,
)
from app.security.outbound import OutboundScan, SecretInRequest

LONG = "alpha bravo charlie " * (SPLICED_APART // 20 + 1)


def _request(messages: tuple[Message, ...]) -> ModelRequest:
    return ModelRequest(
        model="m", system=(), messages=messages, prompt_cache_key=secrets.token_hex(8)
    )


def _message(kind: str, n: int) -> Message:
    if kind == "long":
        return ToolResultMessage(f"call_{n}", "read_file", f"{n}: {LONG}")
    return UserMessage(f"short {n}")


@pytest.mark.parametrize(
    "layout",
    ["", "s", "l", "ll", "sl", "ls", "sls", "lsl", "ssllss", "lslsl", "sssss"],
)
def test_the_pieces_make_the_full_body(layout: str) -> None:
    messages = tuple(_message("long" if c == "l" else "short", n) for n, c in enumerate(layout))
    request = _request(messages)
    for _ in range(2):  # fresh, then from the kept encodings
        pieces = encode_chat_pieces(request)
        assert b"".join(pieces) == encode_body(build_chat_body(request))
        long = [p for p in pieces if len(p) >= SPLICED_APART]
        assert len(long) == layout.count("l")  # each its own piece, none joined in


def test_a_secret_the_join_around_a_long_piece_completes_is_refused() -> None:
    split = 'ends-one"},{"role":"user","content":"starts-two'
    scan = OutboundScan([split])
    first = UserMessage(LONG + "... ends-one")
    second = UserMessage("starts-two ...")
    request = _request((first,))
    encode_chat_pieces(request, scan=scan)  # alone, clean
    with pytest.raises(SecretInRequest):
        encode_chat_pieces(_request((first, second)), scan=scan)
