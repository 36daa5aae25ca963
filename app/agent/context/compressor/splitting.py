"""Where a log splits for compaction: the head kept, the middle summarised, the tail kept.

A tool call and its results are one unit and never split: a result without its call (or
the other way round) is a request every provider refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.agent.context.compressor.sizes import Estimator
from app.db.store import StoredMessage

HEAD_ROWS = 3


def transactions(rows: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Rows grouped so an assistant message with tool calls and its results stay one unit."""
    groups: list[list[StoredMessage]] = []
    for row in rows:
        if (
            row.role == "tool"
            and groups
            and groups[-1][0].role == "assistant"
            and groups[-1][0].tool_calls
        ):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


@dataclass(frozen=True, slots=True)
class Split:
    head: list[StoredMessage]
    middle: list[StoredMessage]
    tail: list[StoredMessage]


def split_for_compaction(
    rows: Sequence[StoredMessage], estimator: Estimator, *, tail_tokens: int
) -> Split:
    """Head (the first exchange), tail (recent messages within budget), and the middle.

    Never splits a tool transaction; the tail always keeps the latest user message and the
    latest visible assistant reply, whatever the budget says.
    """
    groups = transactions(rows)
    head: list[list[StoredMessage]] = []
    while groups and sum(len(g) for g in head) < HEAD_ROWS and groups[0][0].kind != "summary":
        head.append(groups.pop(0))
    tail: list[list[StoredMessage]] = []
    used = 0
    for group in reversed(groups):
        size = sum(estimator.row(r) for r in group)
        if tail and used + size > tail_tokens:
            break
        tail.insert(0, group)
        used += size
    middle = groups[: len(groups) - len(tail)]
    # The latest user message and visible reply are what the next request answers to.
    for role in ("user", "assistant"):
        while middle and not any(_visible(r, role) for g in tail for r in g):
            if not any(_visible(r, role) for g in middle for r in g):
                break
            tail.insert(0, middle.pop())
    flat = [r for g in middle for r in g]
    return Split([r for g in head for r in g], flat, [r for g in tail for r in g])


def _visible(row: StoredMessage, role: str) -> bool:
    if row.role != role:
        return False
    return role == "user" or bool(row.content)
