"""Finding the conversation a client resends, cheaply and with the same answer: the chain's
bytes are those the keys already stored were made from, and looking up the newest hashes
first picks what a lookup of all of them picks."""

from __future__ import annotations

import json
import random

from sqlalchemy import event

from app.agent.opening.continuity import _canonical, chain
from app.agent.turn_request import VisibleMessage
from app.db.chat_store import (
    NEWEST_FIRST,
    Continuation,
    TranscriptKey,
    _find,
    find_continuations,
    index_transcript,
)
from app.db.store import Store
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

ODD = [chr(i) for i in range(0x20)] + ['"', "\\", "/", "\x7f", "\u2028", "\u2029", "\ufeff"]
ODD += ["é", "中", "😀", "\U0010ffff", "\ue000", " ", "a", "}", "["]


def _as_json_wrote_it(message: VisibleMessage) -> bytes:
    """The chain's bytes as they were made before orjson: keys stored then must match."""
    body = [
        message.role,
        message.text,
        [
            [i, n, json.dumps(json.loads(a), sort_keys=True, separators=(",", ":"))]
            for i, n, a in message.calls
        ],
        message.call_id,
        list(message.images),
    ]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_the_chain_s_bytes_are_those_the_stored_keys_were_made_from() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        text = "".join(rng.choice(ODD) for _ in range(rng.randint(0, 24)))
        calls = ((f"call_{text[:2]}", "lookup", json.dumps({"q": text, "n": 1})),)
        message = VisibleMessage("assistant", text, calls=calls, call_id=text[-1:], images=(text,))
        assert _canonical(message) == _as_json_wrote_it(message), repr(text)


def _session(store: Store, sid: str, hashes: list[str]) -> None:
    """A stored conversation indexed at every one of its visible messages."""
    store.create_session(session_id=sid, owner="o", profile="p", system_prompt="x")
    keys = [TranscriptKey(h, i + 1, i + 1) for i, h in enumerate(hashes)]
    index_transcript(store, session_id=sid, keys=keys, head=hashes[-1], length=len(hashes))


def _lookups(store: Store) -> list[str]:
    seen: list[str] = []

    @event.listens_for(store.engine, "before_cursor_execute")
    def _count(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        if "FROM transcript_key" in statement:
            seen.append(statement)

    return seen


def _choice(found: list[Continuation]) -> Continuation | None:
    """The caller's rule (app/agent/opening/lifecycle.py): the longest match the request simply
    extends, else the longest."""
    exact = next((c for c in found if c.stored_len == c.position), None)
    return exact or (found[0] if found else None)


def test_a_long_history_extending_its_conversation_is_one_small_lookup(store: Store) -> None:
    stored = [f"h{i}" for i in range(400)]
    _session(store, "s1", stored)
    request = [*stored, "h-new-question"]
    lookups = _lookups(store)
    found = find_continuations(store, hashes=request)
    assert _choice(found) == Continuation("s1", 400, 400, 0, 400)
    assert len(lookups) == 1
    assert lookups[0].count("?") <= NEWEST_FIRST + 1  # the newest hashes and the limit


def test_an_older_exact_match_is_still_found_behind_a_newer_diverged_one(store: Store) -> None:
    """A conversation the request would rewrite matches among the newest hashes; one it
    simply extends is older and outside them: the full lookup runs and the older one wins,
    as it did before."""
    shared = [f"h{i}" for i in range(24)]
    _session(store, "long", [*shared, *[f"l{i}" for i in range(24, 30)]])
    _session(store, "short", shared[:15])
    request = [*shared, *[f"q{i}" for i in range(24, 30)]]
    lookups = _lookups(store)
    found = find_continuations(store, hashes=request)
    assert found[0] == Continuation("long", 24, 24, 0, 30)
    assert _choice(found) == Continuation("short", 15, 15, 0, 15)
    assert len(lookups) == 2


def test_newest_first_picks_what_a_full_lookup_picks(store: Store) -> None:
    """Random look-alike conversations: whatever they share, the choice from the newest
    hashes first equals the choice from all of them."""
    rng = random.Random(11)
    base = [f"b{i}" for i in range(60)]
    for n in range(40):
        cut = rng.randint(1, 59)
        tail = [f"s{n}-{i}" for i in range(rng.randint(0, 5))]
        _session(store, f"s{n}", base[:cut] + tail)
    for _ in range(300):
        cut = rng.randint(1, 60)
        request = base[:cut] + [f"new{i}" for i in range(rng.randint(1, 12))]
        assert _choice(find_continuations(store, hashes=request)) == _choice(
            _find(store, request, 16, None)
        )


def test_the_chain_still_finds_a_stored_conversation(store: Store) -> None:
    """End to end with real hashes: a resent history's chain meets the keys its session
    stored, newest first."""
    messages = [
        VisibleMessage("user" if i % 2 == 0 else "assistant", f"message {i} é 😀\n")
        for i in range(50)
    ]
    hashes = chain("seed", messages)
    _session(store, "s1", hashes)
    resent = chain("seed", [*messages, VisibleMessage("user", "and now?")])
    assert resent[:50] == hashes
    assert _choice(find_continuations(store, hashes=resent)) == Continuation("s1", 50, 50, 0, 50)
