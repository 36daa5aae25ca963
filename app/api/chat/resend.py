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

import hashlib
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
    dropped: int = 0
    """How many of the first heads (and `where`s) a kept scan let go: `heads[i]` is the
    head after visible message `dropped + i + 1`."""

    def newest(self, keep: int) -> Scanned:
        """The same scan holding only its newest `keep` heads: all a lookup and the next
        extension need (a 10,000-message history's heads alone are a megabyte)."""
        gone = max(len(self.heads) - keep, 0)
        return Scanned(
            self.heads[gone:], self.where[gone:], self.answered, self.count, self.dropped + gone
        )


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
    dropped = known.dropped if known else 0
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
    return Scanned(tuple(heads), tuple(where), answered, len(messages), dropped)


_Key = tuple[str, bytes]
_Entry = tuple[int, int, bytes, Scanned]
"""A kept scan: how many messages it read, how many bytes their orjson encoding is without
its closing bracket, those bytes' sha256, and the scan's newest heads."""
_ENDS = (ord(","), ord("]"))


class RecentScans:
    """The newest scans of recent conversations, so a resent history is scanned from where
    its previous request ended, not from its first message.

    Hashing every message again was most of what a resent turn cost past the full path's
    own growth (1.5 ms at 600 messages). A kept scan is taken when the request's messages,
    encoded (orjson), open with the bytes whose digest it kept: equal bytes are equal JSON,
    types included, so they scan the same; one encoding and one pass of sha256 cost a
    tenth of scanning them. Nothing of the messages is kept, only digests and each scan's
    newest heads. Keyed by the chain's seed (one principal, profile and end user: another
    caller never extends a scan it did not make) and the first message, with a few
    conversations under each key (apps open many conversations with the same words)."""

    PER_KEY = 4

    def __init__(self, *, conversations: int = 4096) -> None:
        self._max = conversations
        self._kept: OrderedDict[_Key, list[_Entry]] = OrderedDict()
        self._lock = threading.Lock()

    def scan(self, seed: str, messages: list[object]) -> Scanned | None:
        """`scan(seed, messages)`, extending a kept scan of a prefix of `messages`."""
        if not messages:
            return scan(seed, messages)
        try:
            text = orjson.dumps(messages)
            key = (seed, hashlib.sha256(orjson.dumps(messages[0])).digest())
        except TypeError:  # not what a JSON body parses to (a test's objects): no keeping
            return scan(seed, messages)
        view = memoryview(text)
        with self._lock:
            # The longest first: one conversation may open with another's whole history
            # (the same words, the same answers), and extending the shorter rescans the rest.
            entries = sorted(self._kept.get(key, ()), key=lambda e: e[0], reverse=True)
        old, digest = None, None
        for entry in entries:
            count, length, kept_digest, _ = entry
            # `[` and the first `count` messages' encodings, ending where a comma (or the
            # closing bracket) follows: the same bytes are the same messages.
            if count <= len(messages) and length < len(text) and text[length] in _ENDS:
                digest = hashlib.sha256(view[:length])
                if digest.digest() == kept_digest:
                    old = entry
                    break
        found = scan(seed, messages, old[3] if old is not None else None)
        if found is not None:
            end = len(text) - 1
            if old is not None and digest is not None:
                digest.update(view[old[1] : end])  # one pass over the bytes in all
            else:
                digest = hashlib.sha256(view[:end])
            new = (found.count, end, digest.digest(), found.newest(NEWEST_FIRST))
            self._keep(key, new, old)
        return found

    def _keep(self, key: _Key, new: _Entry, old: _Entry | None) -> None:
        with self._lock:
            # The scan it extended is no longer needed, nor one of the same messages.
            entries = [e for e in self._kept.pop(key, []) if e is not old and e[2] != new[2]]
            self._kept[key] = [new, *entries][: self.PER_KEY]
            while len(self._kept) > self._max:
                self._kept.popitem(last=False)

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._kept.values())


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
    at = match.position - 1 - scanned.dropped  # the match is among the heads looked up
    cut = scanned.where[at] + 1
    if cut >= len(messages):
        return None  # nothing new: the full path decides what a bare resend means
    point = ResumePoint(
        session_id=match.session_id,
        position=match.position,
        head=scanned.heads[at],
        last_row_id=match.last_row_id,
        compactions=match.compactions,
    )
    return Resumed(point, leading_instructions(messages), cut)
