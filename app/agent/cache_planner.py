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
from dataclasses import dataclass, replace
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
    endpoints: list[int] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        match message:
            case AssistantMessage(tool_calls=calls) if calls:
                open_calls = {call.id for call in calls}
            case ToolResultMessage(tool_call_id=call_id):
                open_calls.discard(call_id)
                if not open_calls and message.content:
                    endpoints.append(index)
            case AssistantMessage() | UserMessage():
                open_calls = set()
                if message.content:
                    endpoints.append(index)
    return endpoints


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
) -> CachePlan:
    """Mark up a request. `stable_len` is the proven end of the stable tier, if any."""
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
    if prefixes is not None:
        budget -= _split_registered_prefixes(out, prefixes, budget)
    for index in transaction_endpoints(out)[::-1][: max(budget, 0)]:
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
) -> CachePlan:
    """The planner, or a baseline kept for benchmarks and for routes without caching:
    `none` sends no markers, `naive` marks the last four non-empty messages."""
    if strategy == "planner":
        return plan_cache(
            system_prompt=system_prompt,
            stable_len=stable_len,
            messages=messages,
            prefixes=prefixes,
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
