"""The cache planner: where to spend the provider's four cache breakpoints.

Two go on the system prompt (the end of the stable tier, which survives everything, and
the end of the prompt, which survives until a compaction) and two ride on the last two
completed transaction endpoints, so each turn writes what it added and every later turn
reads it back at a tenth of the price. With no provable stable/context split, one goes on
the system prompt and three on the tail.

The plan is applied to copies: records are frozen and every change is a `replace`, so a
stored row can never carry cache markup.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from app.providers.base import (
    AssistantMessage,
    Message,
    SystemBlock,
    ToolResultMessage,
    UserMessage,
)

MAX_BREAKPOINTS = 4
TTL = Literal["5m", "1h"]


def effective_ttl(requested: TTL, supported: TTL) -> TTL:
    """1 h only where the route honours it: elsewhere it costs the write premium and the
    cache still expires after 5 m, a false expectation billed on every write."""
    return "1h" if requested == "1h" and supported == "1h" else "5m"


def transaction_endpoints(messages: Sequence[Message]) -> list[int]:
    """Indices where a breakpoint is legal, oldest first.

    An assistant message with tool calls plus all of its results is one transaction, and
    only its last result is a legal boundary: cached mid-transaction, the prefix ends at
    a point the next request will not reproduce. An assistant turn that is only tool calls
    is never one (envelope routes silently drop markers there), and neither is a message
    with no text (a marker needs a non-empty block to sit on).
    """
    scan = EndpointScan()
    scan.feed(messages, 0, len(messages))
    return scan.endpoints


@dataclass(slots=True)
class EndpointScan:
    """`transaction_endpoints` as a fold that can be resumed where it stopped."""

    endpoints: list[int] = field(default_factory=list)
    open_calls: set[str] = field(default_factory=set)

    def feed(self, messages: Sequence[Message], start: int, stop: int) -> None:
        endpoints = self.endpoints
        for index in range(start, stop):
            message = messages[index]
            match message:
                case AssistantMessage(tool_calls=calls) if calls:
                    self.open_calls = {call.id for call in calls}
                case ToolResultMessage(tool_call_id=call_id):
                    self.open_calls.discard(call_id)
                    if not self.open_calls and message.content:
                        endpoints.append(index)
                case AssistantMessage() | UserMessage():
                    self.open_calls = set()
                    if message.content:
                        endpoints.append(index)

    def tail(self, keep: int) -> EndpointScan:
        """A copy holding only the last `keep` endpoints (all the planner can use)."""
        return EndpointScan(self.endpoints[-keep:] if keep else [], set(self.open_calls))


@dataclass(slots=True)
class PlanMemo:
    """What the planner learnt about a message list that only grows (a leased session's
    live projection), so a long session is not rescanned from its start on every call.

    Only the first `stable` messages a caller declares are remembered; everything after
    them (synthesised results, the final-answer note, a repair tail) is scanned afresh.
    The memo proves it still describes the list by holding the last message it saw: a
    rebuilt projection has new message objects, so a stale memo starts over.
    """

    scanned: int = 0
    last: Message | None = None
    endpoints: EndpointScan = field(default_factory=EndpointScan)
    registry_version: int = -1
    prefix_scanned: int = 0
    prefix_hit: int | None = None

    def catch_up(self, messages: Sequence[Message], stable: int) -> None:
        if self.scanned > stable or (self.scanned and messages[self.scanned - 1] is not self.last):
            self.scanned, self.endpoints = 0, EndpointScan()
            self.prefix_scanned, self.prefix_hit = 0, None
        self.endpoints.feed(messages, self.scanned, stable)
        self.scanned = stable
        self.last = messages[stable - 1] if stable else None


@dataclass(frozen=True, slots=True)
class CachePlan:
    system: tuple[SystemBlock, ...]
    messages: tuple[Message, ...]

    @property
    def breakpoints(self) -> int:
        marked = sum(block.cache for block in self.system)
        for message in self.messages:
            marked += message.cache
            if isinstance(message, UserMessage) and message.prefix_cache_at:
                marked += 1
        return marked


def plan_cache(
    *,
    system_prompt: str,
    stable_len: int | None,
    messages: Sequence[Message],
    prefixes: StablePrefixRegistry | None = None,
    memo: PlanMemo | None = None,
    stable: int = 0,
) -> CachePlan:
    """Mark up a request. `stable_len` is the proven end of the stable tier, if any.

    `memo` remembers the scans over `messages[:stable]` between calls; the plan is the
    same with or without it."""
    system: list[SystemBlock] = []
    if stable_len:
        rest = system_prompt[stable_len:].lstrip("\n")
        system.append(SystemBlock(system_prompt[:stable_len], cache=True))
        if rest:
            system.append(SystemBlock(rest, cache=True))
    elif system_prompt:
        system.append(SystemBlock(system_prompt, cache=True))
    budget = MAX_BREAKPOINTS - len(system)
    out = list(messages)
    if memo is None:
        if prefixes is not None:
            budget -= _split_registered_prefixes(out, prefixes, budget)
        endpoints = transaction_endpoints(out)
    else:
        memo.catch_up(out, stable)
        if prefixes is not None:
            budget -= _split_remembered_prefixes(out, prefixes, budget, memo, stable)
        scan = memo.endpoints.tail(MAX_BREAKPOINTS)
        scan.feed(out, stable, len(out))
        endpoints = scan.endpoints
    for index in endpoints[::-1][: max(budget, 0)]:
        out[index] = replace(out[index], cache=True)
    return CachePlan(system=tuple(system), messages=tuple(out))


CacheStrategy = Literal["planner", "naive", "none"]


def apply_strategy(
    strategy: CacheStrategy,
    *,
    system_prompt: str,
    stable_len: int | None,
    messages: Sequence[Message],
    prefixes: StablePrefixRegistry | None = None,
    memo: PlanMemo | None = None,
    stable: int = 0,
) -> CachePlan:
    """The planner, or a baseline kept for benchmarks and for routes without caching:
    `none` sends no markers, `naive` marks the last four non-empty messages."""
    if strategy == "planner":
        return plan_cache(
            system_prompt=system_prompt,
            stable_len=stable_len,
            messages=messages,
            prefixes=prefixes,
            memo=memo,
            stable=stable,
        )
    system = (SystemBlock(system_prompt),) if system_prompt else ()
    out = list(messages)
    if strategy == "naive":
        marked = [i for i, m in enumerate(out) if m.content][-MAX_BREAKPOINTS:]
        for index in marked:
            out[index] = replace(out[index], cache=True)
    return CachePlan(system=system, messages=tuple(out))


def _split_registered_prefixes(
    messages: list[Message], prefixes: StablePrefixRegistry, budget: int
) -> int:
    """Mark the scaffold of registered messages; returns breakpoints spent (at most one,
    keeping at least one for the tail)."""
    if budget < 2:
        return 0
    for index, message in enumerate(messages):
        if isinstance(message, UserMessage) and (n := prefixes.lookup(message.content)):
            messages[index] = replace(message, prefix_cache_at=n)
            return 1
    return 0


def _split_remembered_prefixes(
    messages: list[Message],
    prefixes: StablePrefixRegistry,
    budget: int,
    memo: PlanMemo,
    stable: int,
) -> int:
    """`_split_registered_prefixes` resumed from the memo: a message the registry did not
    match cannot match later while the registry holds the same prefixes (its version)."""
    if budget < 2:
        return 0
    if memo.registry_version != prefixes.version:
        memo.registry_version, memo.prefix_scanned, memo.prefix_hit = prefixes.version, 0, None
    if memo.prefix_hit is None:
        for index in range(memo.prefix_scanned, stable):
            message = messages[index]
            if isinstance(message, UserMessage) and prefixes.lookup(message.content):
                memo.prefix_hit = index
                break
        else:
            memo.prefix_scanned = stable
    first = memo.prefix_hit if memo.prefix_hit is not None else stable
    for index in range(first, len(messages)):
        message = messages[index]
        if isinstance(message, UserMessage) and (n := prefixes.lookup(message.content)):
            messages[index] = replace(message, prefix_cache_at=n)
            return 1
    return 0


class StablePrefixRegistry:
    """Where machine-built messages' stable scaffolds end, declared by their builders.

    The planner looks a message's prefix up here rather than searching for a delimiter: a
    scaffold marker can legitimately appear inside a payload, and a wrong guess either
    shrinks the cached region or absorbs volatile bytes into it, which silently brings
    back the per-invocation cache miss the split exists to remove.

    Bounded LRU (32 entries, 4 MiB), refreshed on hit; the newest entry is never evicted,
    so one oversized scaffold cannot disable the split for everyone else.
    """

    def __init__(self, *, max_entries: int = 32, max_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self.version = 0
        """Changes whenever the set of prefixes does (a lookup's answer depends on it)."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def register(self, prefix: str) -> None:
        if not prefix:
            return
        key = _digest(prefix)
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        self._entries[key] = prefix
        self._bytes += len(prefix.encode())
        self.version += 1
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_entries or self._bytes > self.max_bytes
        ):
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= len(evicted.encode())

    def lookup(self, text: str) -> int | None:
        """Length of the longest registered prefix `text` starts with (strictly shorter
        than `text`, so the split never produces an empty tail block)."""
        best_key: str | None = None
        best = 0
        for key, prefix in self._entries.items():
            if len(prefix) > best and len(prefix) < len(text) and text.startswith(prefix):
                best_key, best = key, len(prefix)
        if best_key is None:
            return None
        self._entries.move_to_end(best_key)
        return best


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
