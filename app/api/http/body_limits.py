"""Bounds on what one request body may cost to parse, and parsing big bodies off the loop.

A legal body can still freeze the server: 100,000 messages (~3 MB) took half a minute and
blocked /health the whole time, and a 5,000-digit integer anywhere in the body tripped
Python's integer-string limit as an uncaught ValueError (a 500). Here every parse failure
is a 400, the structure is bounded (message count, nesting depth, digits per number) with
the offending `param` named, and a body past OFF_LOOP_BYTES is parsed on a thread, under
a cap of two at once (`read_json_body`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import orjson

from app.api.http.errors import ApiError, loc_to_param

MAX_MESSAGES = 10_000
"""Messages per request. Clients resend the history each turn; a real conversation this
long is compacted server-side long before, so past this it is an attack or a bug."""
MAX_DEPTH = 64
"""JSON nesting: deep enough for tool schemas, far short of the recursion limit."""
MAX_INT_DIGITS = 100
"""Digits in one JSON integer; Python's own limit (4,300) raises a ValueError mid-parse."""
OFF_LOOP_BYTES = 256 * 1024
"""Bodies at least this big are parsed on a thread, smaller ones inline (the hop costs
more than parsing them)."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ApiError(
            400,
            f"request body has an integer with more than {MAX_INT_DIGITS} digits",
            code="invalid_json",
        )
    return int(text)


_INEXACT = float(2**63)
"""orjson reads an integer outside [-2**63, 2**64) as a float: a float this big may have
been one, so the exact parse decides (a real float this big is rare, and reads the same)."""


def load_json_body(body: bytes) -> dict[str, Any]:
    """A chat request's body as a JSON object within the bounds above, or an ApiError
    (always a 400)."""
    data = load_json_object(body)
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > MAX_MESSAGES:
        raise ApiError(
            400,
            f"messages: at most {MAX_MESSAGES} messages per request, got {len(messages)}",
            param="messages",
            code="too_many_messages",
        )
    return data


def load_json_object(body: bytes) -> dict[str, Any]:
    """Any request body as a JSON object, its numbers and nesting bounded (an ApiError,
    always a 400, names what is wrong)."""
    data, deep = _parsed(body)
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    if deep:
        path = _too_deep(data, MAX_DEPTH)
        param = loc_to_param(path or []) or None
        raise ApiError(
            400,
            f"{param or 'request body'}: nested deeper than {MAX_DEPTH} levels",
            param=param,
            code="nested_too_deeply",
        )
    return data


def _parsed(body: bytes) -> tuple[Any, bool]:
    """(the body parsed, whether it nests past MAX_DEPTH), as `_parsed_exactly` reads it.

    A client resends its whole history, and the stdlib parse with its surrogate check and
    a path kept per value took 1.6 ms of the event loop at 500 messages; orjson and a
    level-by-level walk take 0.3. orjson refuses everything the exact parse
    refuses (bad UTF-8, lone surrogates, trailing data: fuzzed in the suite), so a body it
    refuses (or with NaN, which json takes) or with a number it may have read inexactly
    goes to the exact parse, for the same answer and the same error text."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    else:
        deep, inexact = _shape(data, MAX_DEPTH)
        if not inexact:
            return data, deep
    data = _parsed_exactly(body)
    return data, _shape(data, MAX_DEPTH)[0]


def _parsed_exactly(body: bytes) -> Any:
    try:
        data = json.loads(body.decode("utf-8"), parse_int=_bounded_int)
        # A lone surrogate ("\ud800") parses but cannot be stored or sent upstream: refuse
        # it here rather than fail half-way through creating the session.
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    except (ValueError, UnicodeError) as exc:  # JSONDecodeError is a ValueError
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    return data


def _shape(data: object, limit: int) -> tuple[bool, bool]:
    """(whether a value sits inside more than `limit` containers, whether a float is big
    enough to have been an integer orjson could not hold), level by level with no path
    kept: building one per value cost 0.75 ms at 500 messages."""
    level = [data]
    depth = 0
    deep = inexact = False
    while level and not deep:
        deep = depth > limit
        below: list[object] = []
        for value in level:
            # Exact types: a parse makes no subclasses, and strings (most values) fall
            # through one comparison each, where two isinstance calls came first.
            kind = type(value)
            if kind is str:
                continue
            if kind is dict:
                below.extend(cast(dict[str, object], value).values())
            elif kind is list:
                below.extend(cast(list[object], value))
            elif kind is float and abs(cast(float, value)) >= _INEXACT:
                inexact = True
        level = below
        depth += 1
    return deep, inexact


def _too_deep(data: object, limit: int) -> list[int | str] | None:
    """The path of the first container nested past `limit`, or None (iterative: no
    recursion to blow)."""
    stack: list[tuple[object, list[int | str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > limit:
            return path[:4]
        if isinstance(value, dict):
            stack.extend((v, [*path, str(k)]) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, [*path, i]) for i, v in enumerate(value))
    return None


_BIG_BODIES = asyncio.Semaphore(2)
"""Big bodies parsed at once: each holds a thread and its parse's memory (a 10 MB body
parses into ~100 MB of objects)."""


async def read_json_body(body: bytes) -> dict[str, Any]:
    """`load_json_body(body)`, on a thread when the body is big, so other streams keep
    flowing while it parses.

    A worker process did this before: the parse freed the loop entirely, but sending the
    validated model back (pickled) cost more than validating it again, 130 ms at 10,000
    messages. On a thread orjson holds the interpreter lock for its one call (3-7 ms at
    1.7 MB) and the walk after it yields every switch interval."""
    if len(body) < OFF_LOOP_BYTES:
        return load_json_body(body)
    async with _BIG_BODIES:
        try:
            return await asyncio.to_thread(load_json_body, body)
        except MemoryError:
            raise ApiError(400, "request body could not be parsed", code="invalid_json") from None
