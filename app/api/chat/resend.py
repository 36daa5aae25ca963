"""A resent history matched to the stored conversation it repeats, before anything is validated.

Clients resend the whole visible history every turn. Validating, translating and hashing
every message of it made a turn's cost grow with the conversation (2x by turn 250) and a
10,000-message request cost a third of a second even when all but its last message were
stored. The continuity chain (`app/agent/opening/continuity.py`) proves a prefix equal to
a stored transcript, so only what follows the prefix needs the full path: here the raw
JSON messages are chained without building a model per message, the stored conversation
they extend is looked up, and the request is cut to its leading instructions plus the new
messages. The lifecycle re-checks the match under the session's lease (`ResumePoint`).

Anything the scan does not recognise as certainly valid (an image, a legacy role, a field
of the wrong type, a conversation that diverges from the stored one) returns None and the
request takes the full path, so every error a client can get stays the full path's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import orjson

from app.agent.opening.continuity import extend_canonical
from app.agent.turn_request import ResumePoint
from app.db.chat_store import NEWEST_FIRST, find_continuations
from app.db.store import Store

_INSTRUCTIONS = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Scanned:
    heads: tuple[str, ...]
    """The rolling hash after each visible message: `continuity.chain`'s keys."""
    where: tuple[int, ...]
    """The index in `messages` of each visible message."""
    answered: bool
    """Whether an assistant message is among them (only an answer of ours identifies a
    conversation: `SessionLifecycle._continuation`)."""
    count: int
    """How many raw messages (instructions too) the scan read."""


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a resent history continues a stored conversation."""

    point: ResumePoint
    lead: int
    """How many system/developer messages open the history (kept: the context tier)."""
    cut: int
    """The index in `messages` of the first message past the stored prefix."""

    def tail(self, messages: list[object]) -> list[object]:
        """What the full path still needs: the leading instructions and the new messages."""
        return messages[: self.lead] + messages[self.cut :]


def _text(content: object) -> str | None:
    """`ChatMessageIn.text()` of a raw content, or None if it holds anything but text (an
    image needs decoding, an unknown part a 400) or would not validate."""
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is not list:
        return None
    out: list[str] = []
    for part in content:
        if type(part) is not dict or part.get("type") != "text" or "image_url" in part:
            return None
        text = part.get("text")
        if text is not None and type(text) is not str:
            return None
        out.append(text or "")
    return "".join(out)


def _calls(raw: object) -> tuple[tuple[str, str, str], ...] | None:
    """A raw `tool_calls` as (id, name, arguments), as `ToolCallIn` fills them in, or None
    if a field has a type the model would refuse."""
    if raw is None:
        return ()
    if type(raw) is not list:
        return None
    out: list[tuple[str, str, str]] = []
    for call in raw:
        if type(call) is not dict:
            return None
        function = call.get("function", {})
        if type(function) is not dict:
            return None
        fields = (call.get("id", ""), function.get("name", ""), function.get("arguments", ""))
        if any(type(f) is not str for f in (*fields, call.get("type", ""))):
            return None
        out.append(fields)
    return tuple(out)


def scan(seed: str, messages: list[object], known: Scanned | None = None) -> Scanned | None:
    """The chain of a raw history from `seed`, or None where the full path must decide.
    `known`: this function's answer for `messages[: known.count]` from the same seed, so
    only the messages after it are read."""
    heads: list[str] = list(known.heads) if known else []
    where: list[int] = list(known.where) if known else []
    answered = known.answered if known else False
    head = heads[-1] if heads else seed
    start = known.count if known else 0
    for i in range(start, len(messages)):
        m = messages[i]
        if type(m) is not dict:
            return None
        role = m.get("role")
        text = _text(m.get("content"))
        calls = _calls(m.get("tool_calls"))
        name, call_id = m.get("name"), m.get("tool_call_id")
        if text is None or calls is None:
            return None
        if (name is not None and type(name) is not str) or (
            call_id is not None and type(call_id) is not str
        ):
            return None
        if role in _INSTRUCTIONS:
            continue  # not part of the chain (apps rewrite them freely)
        if role == "user":
            head = extend_canonical(head, "user", text)
        elif role == "assistant":
            head = extend_canonical(head, "assistant", text, calls)
            answered = True
        elif role == "tool" and call_id:
            head = extend_canonical(head, "tool", text, call_id=call_id)
        else:
            return None  # `function`, an unknown role, a tool result naming no call
        heads.append(head)
        where.append(i)
    return Scanned(tuple(heads), tuple(where), answered, len(messages))


class RecentScans:
    """The newest scans of recent conversations, so a resent history is scanned from where
    its previous request ended, not from its first message.

    Hashing every message again was most of what a resent turn cost past the full path's
    own growth (1.5 ms at 600 messages). Comparing the new request's messages with the
    kept ones is one C-level `==` over the lists (a tenth of that): equal parsed JSON
    scans the same, because every field the scan reads compares equal only to a value of
    the same type (a string to a string, None to None). Keyed by the chain's seed (one
    principal, profile and end user: another caller never extends a scan it did not make)
    and the first message, with a few conversations under each key (apps open many
    conversations with the same words)."""

    PER_KEY = 4

    def __init__(self, *, messages: int = 100_000) -> None:
        self._max = messages
        self._held = 0
        self._kept: OrderedDict[tuple[str, bytes], list[tuple[list[object], Scanned]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def scan(self, seed: str, messages: list[object]) -> Scanned | None:
        """`scan(seed, messages)`, extending a kept scan of a prefix of `messages`."""
        if not messages:
            return scan(seed, messages)
        try:
            key = (seed, orjson.dumps(messages[0]))
        except TypeError:
            return None  # not JSON a body could hold: never here
        known, old = None, None
        with self._lock:
            for kept in self._kept.get(key, ()):
                before, scanned = kept
                if len(before) <= len(messages) and messages[: len(before)] == before:
                    known, old = scanned, kept
                    break
        found = scan(seed, messages, known)
        if found is not None:
            self._keep(key, (messages, found), old)
        return found

    def _keep(
        self,
        key: tuple[str, bytes],
        entry: tuple[list[object], Scanned],
        old: tuple[list[object], Scanned] | None,
    ) -> None:
        with self._lock:
            entries = self._kept.pop(key, [])
            # By identity: `==` would compare the whole histories again.
            for i, kept in enumerate(entries):
                if kept is old:
                    del entries[i]
                    self._held -= len(kept[0])
                    break
            entries.insert(0, entry)
            self._held += len(entry[0])
            while len(entries) > self.PER_KEY:
                self._held -= len(entries.pop()[0])
            self._kept[key] = entries
            while self._held > self._max and self._kept:
                _, dropped = self._kept.popitem(last=False)
                self._held -= sum(len(m) for m, _ in dropped)


def leading_instructions(messages: list[object]) -> int:
    """How many system/developer messages open the history (the prompt's context tier)."""
    n = 0
    while n < len(messages) and isinstance(m := messages[n], dict):
        if m.get("role") not in _INSTRUCTIONS:
            break
        n += 1
    return n


def resumed(
    store: Store, seed: str, messages: list[object], scans: RecentScans | None = None
) -> Resumed | None:
    """The stored conversation `messages` simply extends, found by its newest hashes.

    The choice is `SessionLifecycle._continuation`'s (the longest match the request simply
    extends), taken only when the newest hashes settle it; a history that diverges from
    what is stored, or that nothing stored matches, goes the full path, which retracts or
    starts a session as before."""
    scanned = scans.scan(seed, messages) if scans is not None else scan(seed, messages)
    if scanned is None or not scanned.answered:
        return None
    found = find_continuations(store, hashes=scanned.heads[-NEWEST_FIRST:])
    match = next((c for c in found if c.stored_len == c.position), None)
    if match is None:
        return None
    cut = scanned.where[match.position - 1] + 1
    if cut >= len(messages):
        return None  # nothing new: the full path decides what a bare resend means
    point = ResumePoint(
        session_id=match.session_id,
        position=match.position,
        head=scanned.heads[match.position - 1],
        last_row_id=match.last_row_id,
        compactions=match.compactions,
    )
    return Resumed(point, leading_instructions(messages), cut)
