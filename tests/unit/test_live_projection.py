"""The kept projection of a leased session equals a full reprojection, call after call.

On a real SQLite store: the log grows through every kind of row (text, tool calls and
results, orphan and duplicate results, calls left open, instructions, images), is
rewritten (compaction, prune, retraction), and every projection, open-call list, cache
plan, size estimate and encoded upstream body is compared with one built from scratch.
The verification the whole suite runs with (`COURIER_VERIFY_LIVE_LOG=1`) is shown able to
fail: a corrupted kept state raises instead of reaching the upstream.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import orjson
import pytest

from app.agent.context.cache_planner import PlanMemo, StablePrefixRegistry, apply_strategy
from app.agent.context.compressor import SUMMARY_SCAFFOLD, Compressor
from app.agent.context.live_projection import LiveProjections, ProjectionDrift, projections_for
from app.agent.context.projection import project, unanswered_calls
from app.db.chat_store import StoredImage, put_images, retract_after, session_images
from app.db.store import NewMessage, Store, StoredMessage
from app.providers import openai_chat
from app.providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemBlock,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from app.providers.openai_chat import build_chat_body, encode_body, encode_chat_body
from app.security.outbound import NO_SCAN
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""

LEASE = "L1"


@pytest.fixture
def store(store: Store) -> Store:
    store.create_session(
        session_id="s1",
        owner="k1",
        profile="courier",
        system_prompt="sys",
        lease=LEASE,
        lease_ttl_s=600,
    )
    return store


def _append(store: Store, *messages: NewMessage) -> None:
    store.append_messages(session_id="s1", lease=LEASE, turn_id="t", messages=list(messages))


def _call(cid: str, name: str = "read_file") -> dict[str, str]:
    return {"id": cid, "name": name, "arguments": '{"path": "a"}'}


def _live(store: Store) -> list[StoredMessage]:
    return store.active_messages(session_id="s1")


def _full(store: Store) -> tuple[Message, ...]:
    rows = store._load_active("s1")
    images = session_images(store, session_id="s1") if any(r.images for r in rows) else {}
    return project(rows, images)


STEPS: list[list[NewMessage]] = [
    [NewMessage("user", "hello")],
    [NewMessage("assistant", "let me look", tool_calls=[_call("c1"), _call("c2", "grep")])],
    [NewMessage("tool", "file a", tool_call_id="c1", tool_name="read_file")],
    [NewMessage("tool", "no match", tool_call_id="c2", tool_name="grep", is_error=True)],
    [NewMessage("tool", "again", tool_call_id="c2", tool_name="grep")],  # duplicate
    [NewMessage("assistant", "done")],
    [NewMessage("tool", "orphan", tool_call_id="zz", tool_name="x")],  # answers nothing
    [NewMessage("system", "be brief")],
    [NewMessage("user", "more", api_content="more (as the model sees it)")],
    [NewMessage("assistant", None, tool_calls=[_call("c3")])],  # left open ...
    [NewMessage("user", "next")],  # ... and closed by the projection, not the log
    [NewMessage("assistant", None, tool_calls=[_call("c4"), _call("c5")])],
    [NewMessage("tool", "half", tool_call_id="c4", tool_name="read_file")],
]


def test_the_kept_projection_grows_with_the_log_and_equals_a_full_reprojection(
    store: Store,
) -> None:
    kept = LiveProjections(store, verify=True)
    for step in STEPS:
        _append(store, *step)
        rows = _live(store)
        assert kept.project("s1", rows).messages == _full(store)
        assert kept.unanswered("s1", rows) == unanswered_calls(store._load_active("s1"))
    # Every call after the first extended the kept projection: none was rebuilt.
    assert kept.rebuilds == 1
    # c3 was never answered in the log; c5 is still open at its end.
    assert [cid for cid, _ in kept.unanswered("s1", _live(store))] == ["c3", "c5"]


def test_a_compaction_or_prune_rewrite_rebuilds_from_the_new_log(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    for step in STEPS[:6]:
        _append(store, *step)
        kept.project("s1", _live(store))
    rows = _live(store)
    summary = NewMessage("user", SUMMARY_SCAFFOLD + "they talked", kind="summary")
    store.rewrite_live(
        session_id="s1",
        lease=LEASE,
        archive_ids=[r.id for r in rows],
        insert=[summary, *(r.as_new() for r in rows[-2:])],
        session_updates={"compactions": 1},
    )
    after = kept.project("s1", _live(store))
    assert after.messages == _full(store)
    assert after.messages[0] == UserMessage(SUMMARY_SCAFFOLD + "they talked")
    assert kept.rebuilds == 2
    _append(store, NewMessage("user", "after the summary"))
    assert kept.project("s1", _live(store)).messages == _full(store)
    assert kept.rebuilds == 2


def test_a_rewrite_of_the_same_length_rebuilds(store: Store) -> None:
    # A prune replaces rows one for one: the log is as long as before, so only the rows'
    # identity tells the kept projection it no longer describes them.
    kept = LiveProjections(store, verify=False)
    for step in STEPS[:6]:
        _append(store, *step)
    rows = _live(store)
    kept.project("s1", rows)
    stubbed = [
        r.as_new(api_content="[pruned]", kind="pruned") if r.role == "tool" else r.as_new()
        for r in rows
    ]
    store.rewrite_live(
        session_id="s1",
        lease=LEASE,
        archive_ids=[r.id for r in rows],
        insert=stubbed,
        session_updates={"pending_cache_break": "prune"},
    )
    after = _live(store)
    assert len(after) == len(rows)
    messages = kept.project("s1", after).messages
    assert messages == _full(store)
    assert "[pruned]" in [m.content for m in messages]
    assert kept.unanswered("s1", after) == unanswered_calls(after)
    assert kept.rebuilds == 2


def test_a_changed_model_facing_text_rebuilds(store: Store) -> None:
    kept = LiveProjections(store, verify=False)
    _append(store, *STEPS[0], *STEPS[5])
    rows = _live(store)
    kept.project("s1", rows)
    store.set_api_content(
        session_id="s1", lease=LEASE, message_id=rows[0].id, api_content="hello (rewritten)"
    )
    messages = kept.project("s1", _live(store)).messages
    assert messages == _full(store)
    assert messages[0] == UserMessage("hello (rewritten)")


def test_a_retraction_rebuilds_without_the_retracted_rows(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    for step in STEPS[:6]:
        _append(store, *step)
        kept.project("s1", _live(store))
    keep_after = _live(store)[1].id
    assert retract_after(
        store, session_id="s1", lease=LEASE, after_row_id=keep_after, keep_position=1, head=None
    )
    _append(store, NewMessage("user", "a different question"))
    messages = kept.project("s1", _live(store)).messages
    assert messages == _full(store)
    assert "done" not in [m.content for m in messages]
    assert kept.rebuilds == 2


def test_a_forgotten_kept_log_rebuilds(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    _append(store, *STEPS[0])
    kept.project("s1", _live(store))
    store.forget_live("s1")  # what a lease takeover or a foreign writer does
    _append(store, *STEPS[1])
    assert kept.project("s1", _live(store)).messages == _full(store)
    assert kept.rebuilds == 2


def test_images_are_read_once_and_projected(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.agent.context.live_projection as live

    reads: list[str] = []
    real = live.session_images

    def counted(s: Store, *, session_id: str) -> dict[str, StoredImage]:
        reads.append(session_id)
        return real(s, session_id=session_id)

    monkeypatch.setattr(live, "session_images", counted)
    kept = LiveProjections(store, verify=False)
    pic = StoredImage("ab" * 32, "image/png", "iVBORw0KGgo=", "")
    put_images(store, session_id="s1", images=[pic])
    _append(store, NewMessage("user", "what is this", images=(pic.sha256,)))
    first = kept.project("s1", _live(store)).messages
    assert isinstance(first[0], UserMessage) and first[0].images[0].data == "iVBORw0KGgo="
    for text in ("and now", "and then"):
        _append(store, NewMessage("assistant", "a picture"), NewMessage("user", text))
        assert kept.project("s1", _live(store)).messages == _full(store)
    # The same image named again is already known: no second read.
    _append(store, NewMessage("user", "again", images=(pic.sha256,)))
    assert kept.project("s1", _live(store)).messages == _full(store)
    assert reads == ["s1"]


def test_a_corrupted_kept_projection_is_caught(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    _append(store, *STEPS[0], *STEPS[1], *STEPS[2])
    kept.project("s1", _live(store))
    entry = kept._kept["s1"]
    entry.fold.messages[0] = UserMessage("not what the log says")
    _append(store, *STEPS[3])
    with pytest.raises(ProjectionDrift, match="first difference at 0"):
        kept.project("s1", _live(store))
    # And with verification off, the same corruption would have gone upstream.
    quiet = LiveProjections(store, verify=False)
    quiet.project("s1", _live(store))
    quiet._kept["s1"].fold.messages[0] = UserMessage("not what the log says")
    assert quiet.project("s1", _live(store)).messages != _full(store)


def test_corrupted_open_calls_are_caught(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    _append(store, *STEPS[0], *STEPS[1])
    kept.unanswered("s1", _live(store))
    kept._kept["s1"].pending.pending.clear()
    with pytest.raises(ProjectionDrift):
        kept.unanswered("s1", _live(store))


def test_a_corrupted_plan_memo_is_caught(store: Store) -> None:
    kept = LiveProjections(store, verify=True)
    for step in STEPS[:6]:
        _append(store, *step)
    projected = kept.project("s1", _live(store))
    args = {"strategy": "planner", "system_prompt": "sys", "stable_len": None, "prefixes": None}
    kept.plan(projected, projected.messages, **args)  # type: ignore[arg-type]
    projected.memo.endpoints.endpoints[:] = [0]
    with pytest.raises(ProjectionDrift, match="cache plan"):
        kept.plan(projected, projected.messages, **args)  # type: ignore[arg-type]


def test_the_store_shares_one_set_of_kept_projections(store: Store, tmp_path: Path) -> None:
    other = Store.open(tmp_path / "other.db")
    assert projections_for(store) is projections_for(store)
    assert projections_for(store) is not projections_for(other)


# ---------------------------------------------------------------------- the planner memo


def _random_messages(rng: random.Random, n: int) -> list[Message]:
    out: list[Message] = []
    open_ids: list[str] = []
    for i in range(n):
        roll = rng.random()
        if open_ids and roll < 0.5:
            cid = open_ids.pop(0)
            out.append(ToolResultMessage(cid, "t", rng.choice(["", f"result {i}"])))
        elif roll < 0.65:
            calls = tuple(ToolCall(f"c{i}_{k}", "t", "{}") for k in range(rng.randint(1, 2)))
            out.append(AssistantMessage(rng.choice([None, "thinking"]), tool_calls=calls))
            open_ids = [c.id for c in calls]
        elif roll < 0.8:
            out.append(AssistantMessage(rng.choice(["", f"answer {i}"])))
            open_ids = []
        else:
            text = rng.choice([f"question {i}", SUMMARY_SCAFFOLD + f"summary {i}", ""])
            out.append(UserMessage(text))
            open_ids = []
    return out


@pytest.mark.parametrize("seed", range(12))
def test_the_remembered_plan_equals_a_full_plan_as_the_list_grows(seed: int) -> None:
    rng = random.Random(seed)
    registry = StablePrefixRegistry()
    registry.register(SUMMARY_SCAFFOLD)
    messages = _random_messages(rng, 120)
    memo = PlanMemo()
    stable = 0
    while stable < len(messages):
        stable = min(len(messages), stable + rng.randint(1, 6))
        if rng.random() < 0.1:
            registry.register(f"scaffold {stable}\n")  # the registry changes: rescan
        tail = [UserMessage("final answer now")] if rng.random() < 0.3 else []
        current = [*messages[:stable], *tail]
        for stable_len, prompt in ((None, "sys"), (3, "sys\n\nmore"), (None, "")):
            remembered = apply_strategy(
                "planner",
                system_prompt=prompt,
                stable_len=stable_len,
                messages=current,
                prefixes=registry,
                memo=memo,
                stable=stable,
            )
            full = apply_strategy(
                "planner",
                system_prompt=prompt,
                stable_len=stable_len,
                messages=current,
                prefixes=registry,
            )
            assert remembered == full


def test_a_memo_for_another_list_starts_over() -> None:
    first = [UserMessage("a"), AssistantMessage("b")]
    memo = PlanMemo()
    apply_strategy(
        "planner", system_prompt="", stable_len=None, messages=first, memo=memo, stable=2
    )
    second = [UserMessage("x"), AssistantMessage(None), UserMessage("y")]
    plan = apply_strategy(
        "planner", system_prompt="", stable_len=None, messages=second, memo=memo, stable=3
    )
    assert plan == apply_strategy("planner", system_prompt="", stable_len=None, messages=second)


# ---------------------------------------------------------------------- the size estimate


def test_the_running_size_estimate_equals_a_full_sum(store: Store) -> None:
    comp = Compressor(prefixes=StablePrefixRegistry(), verify=True)
    session = store.get_session(session_id="s1")
    assert session is not None
    for step in STEPS:
        _append(store, *step)
        rows = _live(store)
        full = comp.estimator.request(
            system_prompt=session.system_prompt, tool_snapshot=session.tool_snapshot, rows=rows
        )
        assert comp.estimate(session, rows) == full
    rows = _live(store)
    store.rewrite_live(
        session_id="s1",
        lease=LEASE,
        archive_ids=[r.id for r in rows],
        insert=[NewMessage("user", "short")],
        session_updates={},
    )
    rows = _live(store)
    assert comp.estimate(session, rows) == comp.estimator.request(
        system_prompt=session.system_prompt, tool_snapshot=session.tool_snapshot, rows=rows
    )
    comp._sums["s1"] = (rows[-1], len(rows), 10**9)  # corrupt the running sum
    with pytest.raises(AssertionError, match="drifted"):
        comp.estimate(session, rows)


# ---------------------------------------------------------------------- the encoded body


def _request(messages: tuple[Message, ...], **kw: object) -> ModelRequest:
    return ModelRequest(
        model="m",
        system=(SystemBlock("sys", cache=True),),
        messages=messages,
        tools=(ToolSpec("t", "a tool", {"type": "object"}),),
        prompt_cache_key="s1",
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_the_spliced_body_is_the_full_encode_byte_for_byte(markers: bool, ttl: str) -> None:
    rng = random.Random(7)
    registry = StablePrefixRegistry()
    registry.register(SUMMARY_SCAFFOLD)
    messages = [UserMessage(SUMMARY_SCAFFOLD + "so far"), *_random_messages(rng, 60)]
    for n in range(0, len(messages) + 1, 3):
        # The planner's markers move as the list grows, so some positions change, and the
        # summary's split makes the first message a new object on every call.
        plan = apply_strategy(
            "planner",
            system_prompt="sys",
            stable_len=None,
            messages=messages[:n],
            prefixes=registry,
        )
        request = _request(plan.messages, cache_ttl=ttl)
        body = encode_chat_body(request, cache_markers=markers)
        assert body == encode_body(build_chat_body(request, cache_markers=markers))
        orjson.loads(body)


def test_a_shorter_conversation_with_the_same_start_is_encoded_right() -> None:
    messages = tuple(_random_messages(random.Random(3), 20))
    encode_chat_body(_request(messages))
    shorter = _request(messages[:7])
    assert encode_chat_body(shorter) == encode_body(build_chat_body(shorter))


def test_an_exotic_schema_falls_back_to_the_full_encoder() -> None:
    # orjson refuses integers past 64 bits; the stdlib encoder does not.
    request = dataclasses.replace(
        _request((UserMessage("hi"),)),
        tools=(ToolSpec("t", "d", {"type": "integer", "maximum": 2**70}),),
    )
    assert encode_chat_body(request) == encode_body(build_chat_body(request))


def test_a_corrupted_remembered_encoding_is_caught() -> None:
    messages = (UserMessage("first"), AssistantMessage("second"), UserMessage("third"))
    request = _request(messages)
    body = encode_chat_body(request)
    openai_chat._check_body(request, body, cache_markers=False)
    key = ("s1", False, "5m", NO_SCAN.serial)
    parts = openai_chat._FRAGMENTS._kept._kept[key][1]
    parts[1] = orjson.dumps({"role": "assistant", "content": "tampered"})
    tampered = encode_chat_body(request)
    assert b"tampered" in tampered
    with pytest.raises(AssertionError, match="differs from a full encode"):
        openai_chat._check_body(request, tampered, cache_markers=False)
