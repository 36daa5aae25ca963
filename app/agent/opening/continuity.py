"""Stateless continuity: recognise a conversation a client resends without a session id.

No real client sends `X-Session-Id`; every one resends the whole visible history. Treating
each request as a new session loses the workspace, the server-side tool results between
the visible messages, and the cached prefix. So each session indexes its client-visible
transcript as a chain of rolling hashes (`h_i = H(h_{i-1}, message_i)`, `h_0` the
principal's scope), and a request's own chain is looked up by key: the longest stored
prefix it shares is the conversation it continues, at a cost independent of how many
sessions exist.

Visible means what the client saw and sends back: user messages, the assistant text it
received (one message per turn, however many upstream calls it took), client tool calls
and their results. Server-side tool calls are invisible and are not part of the chain.
System/developer messages are not either: apps rewrite them freely (dates, handoffs).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import orjson

from app.agent.turn_request import VisibleMessage


def _arguments(raw: str) -> str:
    # Clients re-serialise the arguments they parsed (`JSON.stringify`), so compare the
    # value, not the bytes we happened to send.
    try:
        return json.dumps(json.loads(raw), sort_keys=True, separators=(",", ":"))
    except ValueError:
        return raw


def _canonical(message: VisibleMessage) -> bytes:
    """The message's bytes in the chain: compact JSON, UTF-8, as `json.dumps(body,
    ensure_ascii=False, separators=(",", ":"))` writes it, byte for byte (the suite checks
    it), so the keys stored before orjson wrote it still match. A client resends its whole
    history, so every request hashes every message: json took 3.5 µs a message, orjson 0.2."""
    body = [
        message.role,
        message.text,
        [[i, n, _arguments(a)] for i, n, a in message.calls],
        message.call_id,
        list(message.images),
    ]
    return orjson.dumps(body)


def scope_seed(*, owner: str, profile: str, end_user: str | None) -> str:
    """The chain's origin: one principal, one profile, and the app's end user when sent,
    so two end users of one shared key never merge on identical first messages."""
    raw = json.dumps([owner, profile, end_user or ""], separators=(",", ":")).encode()
    return hashlib.sha256(b"courier-transcript\0" + raw).hexdigest()


def extend(head: str, message: VisibleMessage) -> str:
    return hashlib.sha256(head.encode() + b"\0" + _canonical(message)).hexdigest()


def extend_canonical(
    head: str,
    role: str,
    text: str,
    calls: Sequence[tuple[str, str, str]] = (),
    call_id: str = "",
) -> str:
    """`extend` from a message's parts, with no `VisibleMessage` built: the resend scan
    (`app/api/chat/resend.py`) chains a raw history of thousands of messages this way.
    The bytes are `_canonical`'s (a test compares the two on fuzzed messages); a message
    with images never comes here, their keys need the images decoded."""
    body = [role, text, [[i, n, _arguments(a)] for i, n, a in calls], call_id, []]
    return hashlib.sha256(head.encode() + b"\0" + orjson.dumps(body)).hexdigest()


def chain(seed: str, messages: Sequence[VisibleMessage]) -> list[str]:
    """The rolling hash after each message: `chain(...)[i]` covers messages[0..i]."""
    out: list[str] = []
    head = seed
    for message in messages:
        head = extend(head, message)
        out.append(head)
    return out
