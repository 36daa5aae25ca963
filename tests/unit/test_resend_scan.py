"""The resend scan chains a raw history exactly as the full path does, and vouches for no
message the full path would refuse: whatever it passes validates, and whatever it cannot
vouch for it leaves to the full path (None)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from app.agent.opening.continuity import chain
from app.api.chat import resend
from app.api.chat.fields import refuse_unsupported
from app.api.chat.resend import RecentScans, Scanned, leading_instructions, scan
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError
from app.config import Profile
from app.db.chat_store import NEWEST_FIRST

ODD = ["", "a", "é", "中", "😀", '"', "\\", "\n", "}", "[", "\u2028", " "]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ODD) for _ in range(rng.randint(0, 6)))


def _content(rng: random.Random) -> object:
    kind = rng.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return [{"type": "text", "text": _text(rng)} for _ in range(rng.randint(0, 3))]
    if kind == 2:
        return [{"type": "text", "text": None}, {"type": "text", "text": _text(rng), "x": 1}]
    return _text(rng)


def _calls(rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for k in range(rng.randint(0, 2)):
        args = {"q": _text(rng), "n": k}
        # Clients re-serialise what they parsed: other spacing, other key order.
        raw = json.dumps(args, indent=rng.choice([None, 2]), sort_keys=rng.random() < 0.5)
        call: dict[str, Any] = {"id": f"call_{k}", "type": "function"}
        call["function"] = {"name": "lookup", "arguments": raw if k else "not json {"}
        out.append(call)
    return out


def _message(rng: random.Random) -> dict[str, Any]:
    role = rng.choice(["user", "assistant", "tool", "system", "developer"])
    m: dict[str, Any] = {"role": role, "content": _content(rng)}
    if role == "assistant" and rng.random() < 0.5:
        m["tool_calls"] = _calls(rng)
        if rng.random() < 0.3:
            m["content"] = None
    if role == "tool":
        m["tool_call_id"] = f"call_{rng.randrange(3)}"
    if rng.random() < 0.2:
        m["name"] = "someone"
    if rng.random() < 0.2:
        m["refusal"] = None  # an SDK's echo of its own response: an extra, allowed field
    return m


def _full_path_chain(messages: list[dict[str, Any]]) -> list[str]:
    """The chain the lifecycle computes from the full path's translation."""
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": messages})
    refuse_unsupported(request)
    req = turn_request(
        request,
        owner="o",
        admin=False,
        session_id=None,
        profile=Profile(name="m", model="m"),
        on_behalf=OnBehalf(),
    )
    return chain("seed", [m.visible for m in req.messages if m.visible is not None])


def test_the_scan_s_keys_are_the_full_path_s() -> None:
    rng = random.Random(30)
    for _ in range(2000):
        messages = [_message(rng) for _ in range(rng.randint(1, 12))]
        scanned = scan("seed", list(messages))
        assert scanned is not None, messages
        assert list(scanned.heads) == _full_path_chain(messages), messages
        visible = [i for i, m in enumerate(messages) if m["role"] not in ("system", "developer")]
        assert list(scanned.where) == visible
        assert scanned.answered == any(m["role"] == "assistant" for m in messages)


HOSTILE: list[object] = [
    "not a message",
    {"role": "function", "content": "legacy", "name": "f"},
    {"role": "robot", "content": "hi"},
    {"role": "user", "content": 5},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
    {"role": "user", "content": [{"type": "text", "text": "a", "image_url": 3}]},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
    {"role": "user", "content": [{"type": "text", "text": 7}]},
    {"role": "user", "content": "hi", "name": 5},
    {"role": "tool", "content": "r"},
    {"role": "tool", "content": "r", "tool_call_id": ""},
    {"role": "tool", "content": "r", "tool_call_id": 9},
    {"role": "assistant", "content": "a", "tool_calls": {"id": "x"}},
    {"role": "assistant", "content": "a", "tool_calls": [{"id": 1, "function": {}}]},
    {"role": "assistant", "content": "a", "tool_calls": [{"function": "f"}]},
    {"role": "assistant", "content": "a", "tool_calls": [{"function": {"arguments": {}}}]},
    {"role": "assistant", "content": "a", "tool_calls": [{"type": None, "function": {}}]},
]


@pytest.mark.parametrize("bad", HOSTILE, ids=range(len(HOSTILE)))
def test_what_the_scan_cannot_vouch_for_goes_the_full_path(bad: object) -> None:
    """Each of these is refused by the full path, or needs it (an image to decode): the
    scan must not pass it as part of a stored prefix."""
    messages = [{"role": "user", "content": "hi"}, bad, {"role": "assistant", "content": "x"}]
    assert scan("seed", messages) is None


def test_whatever_the_scan_passes_the_full_path_accepts() -> None:
    """Random messages, valid or not: a history the scan vouches for never meets an error
    on the full path (the fast path skips validating it)."""
    rng = random.Random(31)
    pool = [*HOSTILE[1:], *(_message(rng) for _ in range(40))]
    passed = 0
    for _ in range(3000):
        messages = [rng.choice(pool) for _ in range(rng.randint(1, 4))]
        if scan("seed", list(messages)) is None:
            continue
        passed += 1
        _full_path_chain(messages)  # raises if the full path refuses it
    assert passed > 100


def test_leading_instructions_stop_at_the_first_other_message() -> None:
    messages: list[object] = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {"role": "user", "content": "u"},
        {"role": "system", "content": "later"},
    ]
    assert leading_instructions(messages) == 2
    assert leading_instructions(["x"]) == 0


def test_the_full_path_refuses_what_the_hostile_table_holds() -> None:
    """The table is hostile for the full path too (bar the https image, which is valid but
    needs decoding): otherwise the test above would prove nothing."""
    refused = 0
    for bad in HOSTILE:
        messages = [{"role": "user", "content": "hi"}, bad]
        try:
            _full_path_chain(messages)  # type: ignore[list-item]
        except (ApiError, ValueError):
            refused += 1
    assert refused == len(HOSTILE) - 1


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    hashed = [0]
    real = resend.extend_canonical

    def counted(*args: Any, **kwargs: Any) -> str:
        hashed[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(resend, "extend_canonical", counted)
    return hashed


def test_a_kept_scan_is_extended_by_the_new_messages_only(monkeypatch: pytest.MonkeyPatch) -> None:
    hashed = _counting(monkeypatch)
    scans = RecentScans()
    rng = random.Random(32)
    history: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for turn in range(30):
        history += [_message(rng), {"role": "assistant", "content": f"a{turn}"}]
        resent = json.loads(json.dumps(history))  # a new request: equal, not the same objects
        hashed[0] = 0
        got = scans.scan("seed", resent)
        if turn:  # each request after the first hashes its new messages alone
            assert hashed[0] == sum(m["role"] not in ("system", "developer") for m in history[-2:])
        _same(got, scan("seed", resent))
    hashed[0] = 0
    resent = json.loads(json.dumps([*history, {"role": "user", "content": "next"}]))
    scans.scan("seed", resent)
    assert hashed[0] == 1


def test_a_kept_scan_is_never_extended_across_seeds_or_edits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed = _counting(monkeypatch)
    scans = RecentScans()
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "how are you?"},
    ]
    scans.scan("seed-a", history)
    hashed[0] = 0
    other = scans.scan("seed-b", [*history, {"role": "assistant", "content": "fine"}])
    assert hashed[0] == 4  # another principal's chain: all of it
    _same(other, scan("seed-b", [*history, {"role": "assistant", "content": "fine"}]))
    edited = [history[0], {"role": "assistant", "content": "HELLO"}, *history[2:]]
    hashed[0] = 0
    got = scans.scan("seed-a", edited)
    assert hashed[0] == 3  # the kept scan's prefix differs: scanned whole
    _same(got, scan("seed-a", edited))
    # Equal values of another type are not equal JSON for the scan: never reused.
    first: list[object] = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "1"}]
    assert scans.scan("seed-a", first) is None  # a tool result naming no call
    kept: list[object] = [{"role": "user", "content": "hi", "n": 1}]
    scans.scan("seed-a", kept)
    hashed[0] = 0
    scans.scan("seed-a", [{"role": "user", "content": "hi", "n": 1.0}, {"role": "user"}])
    assert hashed[0] == 2  # 1 == 1.0, but they encode apart: nothing reused


def test_kept_scans_hold_a_bounded_number_of_conversations_and_heads() -> None:
    scans = RecentScans(conversations=8)
    for i in range(40):
        history = [{"role": "user", "content": f"conversation {i}"}] * 30
        scans.scan("seed", history)
        scans.scan("seed", [*history, {"role": "assistant", "content": "x"}])
    assert len(scans) == 8  # one per conversation: the scan extended was let go
    assert all(len(e[3].heads) <= NEWEST_FIRST for es in scans._kept.values() for e in es)


def _same(got: Scanned | None, fresh: Scanned | None) -> None:
    """A kept scan extended is the fresh scan's newest part."""
    assert got is not None and fresh is not None
    assert got.heads == fresh.heads[got.dropped :]
    assert got.where == fresh.where[got.dropped :]
    assert (got.answered, got.count) == (fresh.answered, fresh.count)


def test_the_longest_kept_prefix_is_extended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two conversations where one opens with the other's whole history (the same
    questions, the same answers): each request extends its own scan, not the shorter."""
    hashed = _counting(monkeypatch)
    scans = RecentScans()
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": "same"} for i in range(41)]
    scans.scan("seed", long)
    scans.scan("seed", long[:5])  # the younger one, kept more recently
    hashed[0] = 0
    scans.scan("seed", [*long, {"role": "assistant", "content": "x"}])
    assert hashed[0] == 1
