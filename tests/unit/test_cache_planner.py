"""The cache planner's refusals and the stable-prefix registry's bounds."""

from __future__ import annotations

from app.agent.context.cache_planner import (
    StablePrefixRegistry,
    apply_strategy,
    effective_ttl,
    plan_cache,
    transaction_endpoints,
)
from app.agent.context.prompt import build_prompt, recover_stable_boundary, stable_tier
from app.config import Profile
from app.providers.anthropic import build_messages_body
from app.providers.base import (
    AssistantMessage,
    Message,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

CALL_A = ToolCall("a", "read_file", "{}")
CALL_B = ToolCall("b", "list_files", "{}")


def _marked(messages: tuple[Message, ...]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.cache]


def test_two_on_the_system_prompt_two_on_the_tail() -> None:
    messages = (
        UserMessage("one"),
        AssistantMessage("reply one"),
        UserMessage("two"),
        AssistantMessage("reply two"),
        UserMessage("three"),
    )
    plan = plan_cache(system_prompt="STABLE\n\nCONTEXT", stable_len=6, messages=messages)
    assert [(b.text, b.cache) for b in plan.system] == [("STABLE", True), ("CONTEXT", True)]
    assert _marked(plan.messages) == [3, 4]
    assert plan.breakpoints == 4


def test_no_split_falls_back_to_one_system_and_three_tail() -> None:
    messages = tuple(UserMessage(f"m{i}") for i in range(6))
    plan = plan_cache(system_prompt="PROMPT", stable_len=None, messages=messages)
    assert [(b.text, b.cache) for b in plan.system] == [("PROMPT", True)]
    assert _marked(plan.messages) == [3, 4, 5]


def test_never_inside_a_tool_transaction() -> None:
    messages = (
        UserMessage("go"),
        AssistantMessage(None, (CALL_A, CALL_B)),
        ToolResultMessage("a", "read_file", "A"),
        ToolResultMessage("b", "list_files", "B"),
        AssistantMessage(None, (ToolCall("c", "read_file", "{}"),)),
        ToolResultMessage("c", "read_file", "C"),
    )
    # Only the last result of each transaction is legal; the tool-call-only assistant
    # turns (ignored by envelope routes) never are.
    assert transaction_endpoints(messages) == [0, 3, 5]
    plan = plan_cache(system_prompt="S\n\nC", stable_len=1, messages=messages)
    assert _marked(plan.messages) == [3, 5]


def test_an_unfinished_transaction_offers_no_endpoint() -> None:
    messages = (
        UserMessage("go"),
        AssistantMessage(None, (CALL_A, CALL_B)),
        ToolResultMessage("a", "read_file", "A"),
    )
    assert transaction_endpoints(messages) == [0]


def test_never_on_an_empty_block() -> None:
    messages = (
        UserMessage("real"),
        UserMessage(""),
        AssistantMessage("", (CALL_A,)),
        ToolResultMessage("a", "read_file", ""),
    )
    assert transaction_endpoints(messages) == [0]
    body = build_messages_body(
        ModelRequest(
            model="m",
            system=(),
            messages=plan_cache(system_prompt="", stable_len=None, messages=messages).messages,
        )
    )
    for turn in body["messages"]:
        for block in turn["content"]:
            assert block.get("text", "x") != ""


def test_ttl_is_clamped_where_the_route_ignores_one_hour() -> None:
    assert effective_ttl("1h", "1h") == "1h"
    assert effective_ttl("1h", "5m") == "5m"
    assert effective_ttl("5m", "1h") == "5m"


def test_stored_rows_never_carry_markup() -> None:
    messages = (UserMessage("a"), UserMessage("b"))
    plan = plan_cache(system_prompt="S", stable_len=None, messages=messages)
    assert plan.messages[1].cache and not messages[1].cache


def test_baselines() -> None:
    messages = tuple(UserMessage(f"m{i}") for i in range(6))
    none = apply_strategy("none", system_prompt="S", stable_len=1, messages=messages)
    assert not any(b.cache for b in none.system) and not _marked(none.messages)
    naive = apply_strategy("naive", system_prompt="S", stable_len=1, messages=messages)
    assert _marked(naive.messages) == [2, 3, 4, 5]


def test_boundary_recovery_both_paths() -> None:
    profile = Profile()
    tiers = build_prompt(
        profile=profile,
        client_instructions=["be brief"],
        session_id="sess_x",
        started_at=0,
        tool_names=["read_file"],
    )
    stored = tiers.render()
    stable = stable_tier(profile, ["read_file"])
    assert recover_stable_boundary(stored, stable) == len(tiers.stable)
    # The identity changed since the prompt was stored: no boundary, bytes untouched.
    changed = stable_tier(profile, ["read_file", "write_file"])
    assert recover_stable_boundary(stored, changed) is None
    plan = plan_cache(system_prompt=stored, stable_len=None, messages=())
    assert [b.text for b in plan.system] == [stored]
    # A rebuilt tier that is a prefix but does not end at a tier boundary is not proof.
    assert recover_stable_boundary(stored, stable[:-3]) is None


def test_registered_prefix_splits_a_message() -> None:
    registry = StablePrefixRegistry()
    scaffold = "SUMMARY SCAFFOLD " * 10
    registry.register(scaffold)
    messages = (UserMessage(scaffold + "volatile tail"), UserMessage("next"))
    plan = plan_cache(system_prompt="S\n\nC", stable_len=1, messages=messages, prefixes=registry)
    first = plan.messages[0]
    assert isinstance(first, UserMessage) and first.prefix_cache_at == len(scaffold)
    assert plan.breakpoints == 4
    body = build_messages_body(ModelRequest(model="m", system=plan.system, messages=plan.messages))
    blocks = body["messages"][0]["content"]
    assert blocks[0]["text"] == scaffold and "cache_control" in blocks[0]
    assert blocks[1]["text"].startswith("volatile tail")


def test_registry_never_splits_on_a_delimiter_it_was_not_told_about() -> None:
    registry = StablePrefixRegistry()
    registry.register("HEADER:")
    assert registry.lookup("HEADER:") is None  # would leave an empty tail block
    assert registry.lookup("OTHER HEADER: x") is None
    assert registry.lookup("HEADER: x") == len("HEADER:")


def test_registry_bounds_entries_and_bytes() -> None:
    registry = StablePrefixRegistry()
    for i in range(40):
        registry.register(f"prefix-{i:02d}-")
    assert len(registry) == 32
    assert registry.lookup("prefix-00-x") is None  # oldest evicted
    assert registry.lookup("prefix-39-x") is not None
    # Refreshed on hit: prefix-08 survives the next evictions.
    assert registry.lookup("prefix-08-x") is not None
    for i in range(40, 50):
        registry.register(f"prefix-{i:02d}-")
    assert registry.lookup("prefix-08-x") is not None
    assert registry.lookup("prefix-09-x") is None


def test_registry_never_evicts_the_newest_even_if_oversized() -> None:
    registry = StablePrefixRegistry(max_bytes=1024)
    registry.register("small-")
    huge = "H" * 4096
    registry.register(huge)
    assert len(registry) == 1
    assert registry.lookup(huge + "tail") == len(huge)
    assert registry.size_bytes == 4096
