"""Each recent conversation's messages as encoded for its previous upstream call.

A long session's body is mostly history the previous call already encoded, and the whole
body goes out on every call; encoding all of it again cost milliseconds per call at a few
hundred messages. A leased session's projection hands the same message objects to every
call, so the previous call's encodings are reused position by position where the object
is the same one; only what changed (the newest messages, the ones a cache marker moved
to) is encoded again. Identity, not value: hashing every message of a long session on
every call cost more than the encoding it saved. The key only decides which earlier call
is compared with. Least recently used conversations go first, bounded by count and bytes.

Both wires use it, each with its own key and encoder (the OpenAI wire's `_Fragments` in
app/providers/openai_chat.py, the Anthropic wire's in app/providers/anthropic.py).
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from contextlib import suppress

from app.providers.base import Message

BODIES_KEPT = 512
BODY_BYTES_KEPT = 64 * 1024 * 1024


class MessageFragments:
    def __init__(self, *, kept: int = BODIES_KEPT, kept_bytes: int = BODY_BYTES_KEPT) -> None:
        self._kept: OrderedDict[Hashable, tuple[tuple[Message, ...], list[bytes], int]] = (
            OrderedDict()
        )
        self._bytes = 0
        self._max, self._max_bytes = kept, kept_bytes
        self._lock = threading.Lock()
        """A long conversation's body is encoded on a worker thread while the loop encodes
        the others': the lock covers the bookkeeping, never the encoding."""

    def unencoded(self, messages: tuple[Message, ...], key: Hashable) -> int:
        """How many of `messages` the next `encoded` under `key` must encode."""
        with self._lock:
            found = self._kept.get(key)
        if found is None:
            return len(messages)
        old = found[0]
        return max(len(messages) - len(old), 0) + sum(map(operator.is_not, old, messages))

    def encoded(
        self,
        messages: tuple[Message, ...],
        key: Hashable,
        encode: Callable[[Message], bytes],
        check: Callable[[list[bytes]], None] | None = None,
    ) -> list[bytes]:
        """`[encode(m) for m in messages]`, reusing the encodings kept under `key`.

        `encode` must depend on nothing but the message and what `key` holds. `check` sees
        the encodings made by this call before any is kept; when it raises nothing is kept,
        so what it refused is encoded and checked again next time, never reused unchecked."""
        if not messages:
            return []
        fresh: list[bytes] = []
        with self._lock:
            found = self._kept.pop(key, None)
            if found is not None:
                self._bytes -= found[2]
        if found is not None:
            old, parts, size = found[0], found[1][: len(messages)], found[2]
            if len(parts) < len(found[1]):
                size = sum(map(len, parts))
            # C loops over the whole list, Python only at the few positions that changed.
            same = list(map(operator.is_, old, messages))
            at = 0
            with suppress(ValueError):
                while True:
                    at = same.index(False, at)
                    changed = encode(messages[at])
                    size += len(changed) - len(parts[at])
                    parts[at] = changed
                    fresh.append(changed)
                    at += 1
            added = [encode(message) for message in messages[len(old) :]]
            parts += added
            fresh += added
            size += sum(map(len, added))
        else:
            parts = fresh = [encode(message) for message in messages]
            size = sum(map(len, parts))
        if check is not None:
            check(fresh)
        with self._lock:
            if (replaced := self._kept.pop(key, None)) is not None:
                self._bytes -= replaced[2]
            self._kept[key] = (messages, parts, size)
            self._bytes += size
            while len(self._kept) > 1 and (
                len(self._kept) > self._max or self._bytes > self._max_bytes
            ):
                _, (_, _, dropped) = self._kept.popitem(last=False)
                self._bytes -= dropped
        return parts
