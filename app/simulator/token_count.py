"""Deterministic token counting and prefix hashing.

Counting rule (documented so tests can build prompts of an exact size):

* `count_tokens(text) = ceil(len(text.encode("utf-8")) / 4)`; the empty string is 0 tokens,
  any non-empty string at least 1.
* A request is a sequence of *segments*, in wire order: tools, then system blocks, then
  each message's content blocks and tool calls. A segment has a *header* (canonical JSON of
  its structural facts: role, block type, ids) and a *body*. Only the body is counted:
  - text content (strings, text blocks, system text, tool results' text) -> the text itself;
  - everything else (tool definitions, tool calls, tool_use blocks, images...) -> the
    canonical JSON of the object, with `cache_control` removed.
* Prompt tokens = sum of the segments' body tokens. There is no per-message overhead.
* Output tokens = tokens(text) + tokens(reasoning) + tokens(arguments) per tool call.

Prefix identity: a prefix is hashed over the exact bytes of its segments, framed so two
different segment lists can never produce the same byte stream. `cache_control` markers are
not part of the bytes, so marking a block does not change the prefix it ends.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

BYTES_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def canonical_json(value: Any) -> str:
    """Key-sorted, compact JSON: the same object always gives the same bytes."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "cache_control"}


@dataclass(frozen=True, slots=True)
class Segment:
    header: str
    body: str
    body_bytes: bytes = field(init=False, repr=False, compare=False)
    tokens: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # Cached because prefix hashing and counting both walk the bytes of large prompts.
        encoded = self.body.encode("utf-8")
        object.__setattr__(self, "body_bytes", encoded)
        object.__setattr__(self, "tokens", math.ceil(len(encoded) / BYTES_PER_TOKEN))


def text_segment(facts: dict[str, Any], text: str) -> Segment:
    return Segment(canonical_json(facts), text)


def json_segment(facts: dict[str, Any], value: Any) -> Segment:
    return Segment(canonical_json(facts), canonical_json(value))


def total_tokens(segments: Iterable[Segment]) -> int:
    return sum(segment.tokens for segment in segments)


def _frame(length: int) -> bytes:
    return length.to_bytes(8, "big")


def _start(namespace: str) -> Any:
    hasher = hashlib.sha256()
    encoded = namespace.encode("utf-8")
    hasher.update(encoded + _frame(len(encoded)))
    return hasher


def segment_digests(namespace: str, segments: Sequence[Segment]) -> list[str]:
    """Digest of the prefix ending after each segment (index i -> segments[: i + 1])."""
    hasher = _start(namespace)
    digests: list[str] = []
    for segment in segments:
        header = segment.header.encode("utf-8")
        # Lengths trail their field, so a partial body (see token_digests) frames the same way.
        hasher.update(header + _frame(len(header)) + segment.body_bytes)
        hasher.update(_frame(len(segment.body_bytes)))
        digests.append(hasher.hexdigest())
    return digests


def token_digests(
    namespace: str, segments: Sequence[Segment], positions: Sequence[int]
) -> dict[int, str]:
    """Digest of the prefix holding the first `p` tokens, for each `p` in `positions`.

    A position inside a segment cuts its body after `4 * k` bytes; a position at a segment's
    end equals that segment's full digest. Linear in the prompt size, however many positions.
    """
    wanted = sorted(set(positions))
    digests: dict[int, str] = {}
    hasher = _start(namespace)
    before = 0
    cursor = 0
    for segment in segments:
        header = segment.header.encode("utf-8")
        hasher.update(header + _frame(len(header)))
        done = 0
        after = before + segment.tokens
        while cursor < len(wanted) and wanted[cursor] <= after:
            cut = min(len(segment.body_bytes), (wanted[cursor] - before) * BYTES_PER_TOKEN)
            hasher.update(segment.body_bytes[done:cut])
            done = cut
            snapshot = hasher.copy()
            snapshot.update(_frame(cut))
            digests[wanted[cursor]] = snapshot.hexdigest()
            cursor += 1
        hasher.update(segment.body_bytes[done:])
        hasher.update(_frame(len(segment.body_bytes)))
        before = after
    return digests
