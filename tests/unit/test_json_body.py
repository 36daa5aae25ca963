"""The request body's parse (app/api/http/body_limits.py): orjson on the fast path, and exactly
what the stdlib parse answered before, refusals and their words included."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from app.api.http import body_limits
from app.api.http.errors import ApiError


def _exact(body: bytes) -> Any:
    """The parse as it was: the stdlib, bounded integers, lone surrogates refused."""
    return body_limits._parsed_exactly(body)


def _outcome(parse: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "ok", parse(body)
    except ApiError as exc:
        return "refused", (exc.code, exc.message)


PIECES = [b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"1", b"0", b"-", b".", b"e"]
PIECES += [b"E", b"+", b" ", b"\t", b"\n", b"\x01", b"\x7f", b"a", b"\\u", b"d800", b"dc00"]
PIECES += [b"00e9", b"true", b"null", b"NaN", b"Infinity", b"\xc3\xa9", b"\xed\xa0\x80", b"\xff"]
PIECES += [b"\xf0\x9f\x98\x80", b"\\/", b'\\"', b"\x00", b"\xef\xbb\xbf", b"12345678901234567890"]
SEEDS = [
    b'{"a": "x", "b": [1, 2.5, -3e2, true, null], "c": {"d": "\\u00e9\\ud83d\\ude00"}}',
    b'{"model":"courier","messages":[{"role":"user","content":"hi"}],"temperature":0.7}',
    b'{"seed": 18446744073709551615, "n": -9223372036854775808, "t": 1e-7}',
]


def _mutated(rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12)))
    body = bytearray(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(body) + 1)
        if rng.random() < 0.5:
            body[i:i] = rng.choice(PIECES)
        else:
            del body[i : i + rng.randint(1, 3)]
    return bytes(body)


def test_the_fast_parse_answers_as_the_exact_one_did() -> None:
    rng = random.Random(5)
    for _ in range(20_000):
        body = _mutated(rng)
        fast = _outcome(lambda b: body_limits._parsed(b)[0], body)
        exact = _outcome(_exact, body)
        if fast[0] == exact[0] == "ok" and fast[1] != fast[1]:
            continue  # NaN is never equal to itself
        assert fast == exact, body


@pytest.mark.parametrize(
    "number",
    [
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "1" * 100,
        "0.1",
        "1e300",
        "-2.5e-300",
        "123456789.123456789123456789",
    ],
)
def test_numbers_read_exactly_at_the_edges_of_64_bits(number: str) -> None:
    body = f'{{"seed": {number}, "messages": []}}'.encode()
    assert body_limits.load_json_body(body)["seed"] == json.loads(number)


def test_an_integer_past_the_digit_bound_is_still_refused_with_its_reason() -> None:
    with pytest.raises(ApiError, match="digits") as caught:
        body_limits.load_json_body(b'{"seed": ' + b"9" * 101 + b"}")
    assert caught.value.code == "invalid_json"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"a": "\\ud800"}', "invalid_json"),
        (b'{"a": "\xed\xa0\x80"}', "invalid_json"),
        (b'{"a": 1} trailing', "invalid_json"),
        (b"[" * 2000 + b"]" * 2000, "invalid_json"),
        (b'{"m": ' + b"[" * 65 + b"]" * 65 + b"}", "nested_too_deeply"),
        (b'"a string"', "invalid_json"),
    ],
)
def test_refusals_keep_their_codes(body: bytes, code: str) -> None:
    with pytest.raises(ApiError) as caught:
        body_limits.load_json_body(body)
    assert caught.value.code == code and caught.value.status == 400


def test_nesting_is_counted_as_before() -> None:
    """64 containers inside the body are fine, 65 are not, and the refusal names where."""
    ok = b'{"m": ' + b"[" * 63 + b"]" * 63 + b"}"
    assert body_limits.load_json_body(ok)["m"]
    deep = {"metadata": {"k": {"k": {"k": {}}}}}
    level = deep["metadata"]["k"]["k"]["k"]
    for _ in range(70):
        level["k"] = {}
        level = level["k"]
    with pytest.raises(ApiError) as caught:
        body_limits.load_json_body(json.dumps(deep).encode())
    assert caught.value.code == "nested_too_deeply" and caught.value.param == "metadata.k.k.k"


def test_nan_is_taken_as_the_stdlib_took_it() -> None:
    data = body_limits.load_json_body(b'{"temperature": NaN}')
    assert data["temperature"] != data["temperature"]
