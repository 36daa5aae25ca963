"""The summary that replaces a compacted middle: the model's, or a deterministic fallback.

What the summariser is asked (its system prompt and template), the transcript it reads,
the fallback written without a model, and the plan a compaction gathers in one pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from app.agent.context.compressor.sizes import Estimator
from app.agent.context.compressor.splitting import Split, split_for_compaction
from app.db.store import NewMessage, StoredMessage
from app.observe.loop_passes import note as note_pass
from app.providers.base import ModelRequest, SamplingParams, SystemBlock, UserMessage
from app.providers.usage import Usage

MIN_MIDDLE_TOKENS = 2_000
"""Below this the middle is dropped with a fallback summary instead of a model call."""
SUMMARY_MAX_TOKENS = 2_000

SUMMARY_SCAFFOLD = (
    "[Context summary] Earlier parts of this conversation were summarised to fit the "
    "context window. The originals are archived and can be searched with session_search "
    "or read back with recall. Treat this summary as your own notes: it records what was "
    "asked, decided and done before the messages that follow.\n\n"
)

SUMMARISER_SYSTEM = (
    "You write compact, faithful working notes of an agent's conversation so the agent can "
    "continue after the original messages are removed. Never invent facts. Quote "
    "constraints and identifiers exactly."
)

SUMMARY_TEMPLATE = """Summarise the conversation excerpt below for the agent itself. If it starts
with a [previous summary], update that summary: keep what still holds, fold in what is new,
drop what was superseded. Use exactly these headings, each followed by terse bullet points
(write "none" when empty):

## Goal
## Constraints (verbatim)
## Completed actions
## Active state
## Decisions
## Open questions
## Files
## Critical context
"""


def render_transcript(rows: Sequence[StoredMessage], *, limit_chars: int = 400_000) -> str:
    lines: list[str] = []
    for row in rows:
        text = row.api_content if row.api_content is not None else (row.content or "")
        if row.kind == "summary":
            lines.append(f"[previous summary]\n{text.removeprefix(SUMMARY_SCAFFOLD)}")
        elif row.role == "tool":
            lines.append(f"[tool result {row.tool_name}] {text[:4000]}")
        elif row.tool_calls:
            calls = ", ".join(
                f"{c['name']}({c.get('arguments', '')[:300]})" for c in row.tool_calls
            )
            lines.append(f"[assistant] {text}\n[assistant called] {calls}".strip())
        else:
            lines.append(f"[{row.role}] {text}")
    out = "\n\n".join(lines)
    return out[-limit_chars:]


def fallback_summary(rows: Sequence[StoredMessage]) -> str:
    """A deterministic summary for when no model summary is possible or worth it."""
    asks = [
        (r.content or "").strip().splitlines()[0][:200]
        for r in rows
        if r.role == "user" and r.content
    ]
    tools: dict[str, int] = {}
    for r in rows:
        for call in r.tool_calls:
            tools[call["name"]] = tools.get(call["name"], 0) + 1
    parts = [f"{len(rows)} earlier messages were removed without a model summary."]
    if asks:
        parts.append("The user asked: " + " | ".join(asks[-10:]))
    if tools:
        parts.append("Tools used: " + ", ".join(f"{k} x{v}" for k, v in sorted(tools.items())))
    return "\n".join(parts)


Summariser = Callable[[ModelRequest], Awaitable[tuple[str, Usage | None]]]


class SummarySkipped(Exception):
    """The summariser declined to call the model (a spend cap): says nothing about its
    health, so the fallback that follows is streak-neutral."""


async def model_summary(summarise: Summariser, *, model: str, transcript: str) -> str:
    """The model's summary of `transcript` (`render_transcript` of the middle)."""
    request = ModelRequest(
        model=model,
        system=(SystemBlock(SUMMARISER_SYSTEM),),
        messages=(UserMessage(SUMMARY_TEMPLATE + "\n---\n" + transcript),),
        sampling=SamplingParams(max_tokens=SUMMARY_MAX_TOKENS),
    )
    text, _usage = await summarise(request)
    return text.strip()


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What a compaction needs from the log, gathered in one pass (off the event loop for
    a long log: see app/observe/loop_passes.py)."""

    split: Split
    middle_tokens: int
    fallback: str
    """The deterministic summary of the middle."""
    transcript: str | None
    """The middle rendered for the summariser; None when no model summary is asked for."""
    tail: list[NewMessage]
    """The tail, as re-inserted after the summary."""


def plan_compaction(
    rows: Sequence[StoredMessage], estimator: Estimator, *, tail_tokens: int, cooling: bool
) -> CompactionPlan:
    note_pass("compact", len(rows))
    split = split_for_compaction(rows, estimator, tail_tokens=tail_tokens)
    middle_tokens = sum(estimator.row(r) for r in split.middle)
    ask = split.middle and middle_tokens >= MIN_MIDDLE_TOKENS and not cooling
    return CompactionPlan(
        split,
        middle_tokens,
        fallback_summary(split.middle) if split.middle else "",
        render_transcript(split.middle) if ask else None,
        [row.as_new() for row in split.tail],
    )
