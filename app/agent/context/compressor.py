"""Keep a session inside its window without paying for compactions it does not need.

Three pieces, each a function the loop calls, never code inside it:

- a calibrated trigger: our rough estimate is re-anchored to the provider's billed prompt
  tokens after every response that fit, and compaction fires on the projection
  `billed_at_anchor + (rough_now - rough_at_anchor)`, not on the raw guess (which runs
  2-3x high on CJK text and would compact at a third of the real window);
- a deterministic prune (no model call) that commits only for a real win and then waits
  out a runway, and runs only where rewriting history is free: at the start of a turn
  whose cached prefix has already expired;
- a non-destructive batch compaction, judged afterwards by a verdict, behind a breaker
  that survives restarts: a transcript whose floor alone exceeds the threshold would
  otherwise compact again on every turn, forever.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.agent.context.cache_planner import StablePrefixRegistry
from app.config import Profile
from app.db.models import SessionRow
from app.db.store import NewMessage, Store, StoredMessage
from app.observe.loop_passes import note as note_pass
from app.observe.loop_passes import off_loop
from app.providers.base import (
    ModelRequest,
    ProviderError,
    SamplingParams,
    SystemBlock,
    UserMessage,
)
from app.providers.usage import Usage

log = logging.getLogger(__name__)

MIN_RECLAIM = 4_096
"""A prune commits only if it frees this many tokens: smaller wins are not worth a break."""
BLOCK_WINDOW_S = 300.0
SUMMARY_COOLDOWN_S = 300.0
MIN_MIDDLE_TOKENS = 2_000
"""Below this the middle is dropped with a fallback summary instead of a model call."""
PRUNE_RESULT_CHARS = 2_000
PRUNE_ARGUMENT_CHARS = 2_000
HEAD_ROWS = 3
MEMO_ROWS = 200_000
SUMS_KEPT = 4_096
OVERFLOW_RETRIES = 3
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

_CJK = re.compile(
    "[\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul
    "\uf900-\ufaff"
    "\U00020000-\U0002fa1f]"
)


IMAGE_TOKENS = 1_600
"""An image's rough cost: both providers bill a ~1,000x1,000 image at about this many."""


@functools.lru_cache(maxsize=256)
def rough_tokens(text: str) -> int:
    """ceil(chars/4) for ordinary text, one token per CJK code point.

    Cached: the system prompt and tool schemas are measured before every upstream call,
    and a per-character Python loop over them cost ~7 ms of time-to-first-token each.
    """
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def row_text(row: StoredMessage) -> str:
    text = row.api_content if row.api_content is not None else (row.content or "")
    if row.tool_calls:
        text += json.dumps(list(row.tool_calls))
    return text


def threshold_tokens(profile: Profile) -> int:
    """50 % of (window - max output), at least 75 % for windows under 512K."""
    usable = max(profile.context_window - profile.max_output_tokens, 1024)
    share = profile.compaction_threshold
    if share is None:
        share = 0.75 if profile.context_window < 512_000 else 0.5
    return int(usable * share)


def tail_budget(profile: Profile) -> int:
    """max(10K, min(25K, 2.5 % of the window)), but never more than a third of the
    threshold: on a small window a 10K tail alone would leave compaction ineffective."""
    budget = max(10_000, min(25_000, int(profile.context_window * 0.025)))
    return min(budget, threshold_tokens(profile) // 3)


@dataclass
class Estimator:
    """Rough sizes, memoised per message id: rows never change once written."""

    _memo: dict[int, int] = field(default_factory=dict)

    def row(self, row: StoredMessage) -> int:
        size = self._memo.get(row.id)
        if size is None:
            if len(self._memo) >= MEMO_ROWS:
                self._memo.clear()  # a long-lived server must not grow this without bound
            size = rough_tokens(row_text(row)) + 4 + IMAGE_TOKENS * len(row.images)
            self._memo[row.id] = size
        return size

    def request(
        self, *, system_prompt: str, tool_snapshot: str, rows: Sequence[StoredMessage]
    ) -> int:
        return self.floor(system_prompt, tool_snapshot) + sum(self.row(r) for r in rows)

    @staticmethod
    def floor(system_prompt: str, tool_snapshot: str) -> int:
        """What every request carries in full, whatever is compacted."""
        return rough_tokens(system_prompt) + rough_tokens(tool_snapshot)


def projected(rough_now: int, session: SessionRow) -> int:
    if session.anchor_rough is None or session.anchor_billed is None:
        return rough_now
    return session.anchor_billed + (rough_now - session.anchor_rough)


# ---------------------------------------------------------------------- the breaker


@dataclass
class Breaker:
    """Blocks automatic compaction after 2 ineffective verdicts or 2 fallback summaries.

    The counters live on the session row; the deadline is armed on the first blocked
    evaluation, on this process's monotonic clock. A fresh process that loads a tripped
    counter therefore starts a full window blocked instead of probing at once: a restart
    cannot disarm the guard.
    """

    clock: Callable[[], float] = time.monotonic
    _deadlines: dict[str, float] = field(default_factory=dict)

    def allows(self, store: Store, session: SessionRow, *, lease: str) -> bool:
        tripped = session.compaction_strikes >= 2 or session.fallback_streak >= 2
        if not tripped:
            self._deadlines.pop(session.id, None)
            return True
        deadline = self._deadlines.get(session.id)
        now = self.clock()
        if deadline is None:
            self._deadlines[session.id] = now + BLOCK_WINDOW_S
            log.warning(
                "session %s: automatic compaction blocked (%d ineffective, %d fallback)",
                session.id,
                session.compaction_strikes,
                session.fallback_streak,
            )
            return False
        if now < deadline:
            return False
        # Probation: one attempt. If it fails too, the next verdict re-trips at once.
        self._deadlines.pop(session.id, None)
        strikes, streak = min(session.compaction_strikes, 1), min(session.fallback_streak, 1)
        store.update_session(
            session_id=session.id, lease=lease, compaction_strikes=strikes, fallback_streak=streak
        )
        session.compaction_strikes, session.fallback_streak = strikes, streak
        log.info("session %s: compaction probation attempt", session.id)
        return True


# ---------------------------------------------------------------------- calibration


def observe_response(
    store: Store,
    session: SessionRow,
    *,
    rough_at_call: int,
    usage: Usage | None,
    threshold: int,
    lease: str,
) -> None:
    """Re-anchor on a response whose prompt fit, and give a pending compaction its verdict.

    The verdict lives here, where the billed count is visible, and not in the preflight
    check: the rough preflight estimate can dip below the line on its own and would clear
    strikes and reopen the loop every turn. A response without usage consumes the latch,
    so a reading three turns later is never charged to a compaction it has nothing to do
    with.
    """
    updates: dict[str, Any] = {}
    if usage is not None and usage.prompt_tokens > 0:
        updates |= {"anchor_rough": rough_at_call, "anchor_billed": usage.prompt_tokens}
    if session.verdict_pending:
        updates["verdict_pending"] = False
        if usage is not None and usage.prompt_tokens > 0:
            ineffective = usage.prompt_tokens >= threshold
            updates["compaction_strikes"] = session.compaction_strikes + 1 if ineffective else 0
            if ineffective:
                log.warning(
                    "session %s: compaction left the prompt at %d tokens (threshold %d)",
                    session.id,
                    usage.prompt_tokens,
                    threshold,
                )
    updates["last_call_at"] = time.time()
    store.update_session(session_id=session.id, lease=lease, **updates)


# ---------------------------------------------------------------------- splitting


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


# ---------------------------------------------------------------------- summaries


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


# ---------------------------------------------------------------------- the compressor


CompactionReason = Literal["threshold", "overflow"]


@dataclass
class Compressor:
    """Process-wide: the estimator memo and the breaker's deadlines. Durable state is on
    the session row."""

    prefixes: StablePrefixRegistry
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    estimator: Estimator = field(default_factory=Estimator)
    breaker: Breaker = field(init=False)
    _floor_reported: set[str] = field(default_factory=set)
    _sums: dict[str, tuple[StoredMessage, int, int]] = field(default_factory=dict)
    """Per session: (last row summed, rows summed, their total size)."""
    verify: bool = field(default_factory=lambda: os.environ.get("COURIER_VERIFY_LIVE_LOG") == "1")
    """Tests: check the running sum against a full one on every call."""

    def __post_init__(self) -> None:
        self.breaker = Breaker(clock=self.clock)
        self.prefixes.register(SUMMARY_SCAFFOLD)

    def estimate(self, session: SessionRow, rows: Sequence[StoredMessage]) -> int:
        floor = self.estimator.floor(session.system_prompt, session.tool_snapshot)
        total = self._rows_total(session.id, rows)
        if self.verify and total != sum(self.estimator.row(r) for r in rows):
            raise AssertionError(f"running size of {session.id}'s live log drifted")
        return floor + total

    def _rows_total(self, session_id: str, rows: Sequence[StoredMessage]) -> int:
        """The rows' summed sizes, resumed from the last call's sum for this session.

        The store's kept live log only grows between rewrites, and a rewrite brings new
        row objects: the same last row at the same index means the same prefix (the
        argument app/agent/context/live_projection.py makes for the projection).
        """
        row = self.estimator.row
        kept = self._sums.get(session_id)
        start = kept[1] if kept is not None and self._resumes(kept, rows) else 0
        note_pass("size", len(rows) - start)
        if kept is not None and start:
            total = kept[2] + sum(row(r) for r in rows[start:])
        else:
            total = sum(row(r) for r in rows)
        if rows:
            if len(self._sums) >= SUMS_KEPT:
                self._sums.clear()
            self._sums[session_id] = (rows[-1], len(rows), total)
        return total

    @staticmethod
    def _resumes(kept: tuple[StoredMessage, int, int], rows: Sequence[StoredMessage]) -> bool:
        return kept[1] <= len(rows) and rows[kept[1] - 1] is kept[0]

    def unsized(self, session_id: str, rows: Sequence[StoredMessage]) -> int:
        """How many of `rows` the next `estimate` must size (the rest it resumes from)."""
        kept = self._sums.get(session_id)
        return len(rows) - kept[1] if kept is not None and self._resumes(kept, rows) else len(rows)

    def needs_compaction(
        self, store: Store, session: SessionRow, profile: Profile, rough: int, *, lease: str
    ) -> bool:
        threshold = threshold_tokens(profile)
        floor = self.estimator.floor(session.system_prompt, session.tool_snapshot)
        if floor >= threshold:
            if session.id not in self._floor_reported:
                self._floor_reported.add(session.id)
                log.error(
                    "session %s: the system prompt and tool schemas alone (~%d tokens) meet "
                    "the compaction threshold (%d); compaction cannot help, so it is off",
                    session.id,
                    floor,
                    threshold,
                )
            return False
        estimate = projected(rough, session) if profile.calibrated_trigger else rough
        if estimate < threshold:
            return False
        return self.breaker.allows(store, session, lease=lease)

    # -------------------------------------------------------------- prune

    async def prune(
        self,
        store: Store,
        session: SessionRow,
        profile: Profile,
        *,
        lease: str,
        rows: Sequence[StoredMessage],
    ) -> int:
        """Deterministic prune of old tool output; returns tokens reclaimed (0 = no commit)."""
        planned = await off_loop(
            len(rows), functools.partial(self._plan_prune, session, profile, rows)
        )
        if planned is None:
            return 0
        rough, reclaimed, first, rewritten = planned
        runway = max(reclaimed, profile.prune_trigger_tokens, MIN_RECLAIM)
        rewrite = functools.partial(
            store.rewrite_live,
            session_id=session.id,
            lease=lease,
            archive_ids=[r.id for r in rows[first:]],
            insert=rewritten,
            session_updates={
                "prune_rearm_at": rough - reclaimed + runway,
                "anchor_rough": None,
                "anchor_billed": None,
                "pending_cache_break": "prune",
            },
        )
        await store.commit_off_loop(rewrite)
        log.info("session %s: pruned %d tokens of old tool output", session.id, reclaimed)
        return reclaimed

    def _plan_prune(
        self, session: SessionRow, profile: Profile, rows: Sequence[StoredMessage]
    ) -> tuple[int, int, int, list[NewMessage]] | None:
        """(size, tokens reclaimed, first row rewritten, the rewrite), or None to keep all."""
        note_pass("prune", len(rows))
        rough = self.estimate(session, rows)
        if session.prune_rearm_at is not None and rough < session.prune_rearm_at:
            return None
        protected = {
            r.id
            for r in split_for_compaction(
                rows, self.estimator, tail_tokens=tail_budget(profile)
            ).tail
        }
        replacements = prune_rows(rows, protected)
        if not replacements:
            return None
        before = sum(self.estimator.row(rows[i]) for i in replacements)
        after = sum(rough_tokens(row_text_new(m)) + 4 for m in replacements.values())
        reclaimed = before - after
        if reclaimed < MIN_RECLAIM:
            return None
        first = min(replacements)
        rewritten = [replacements.get(i) or rows[i].as_new() for i in range(first, len(rows))]
        return rough, reclaimed, first, rewritten

    # -------------------------------------------------------------- compaction

    async def compact(
        self,
        store: Store,
        session: SessionRow,
        profile: Profile,
        *,
        lease: str,
        rows: Sequence[StoredMessage],
        summarise: Summariser,
        rebuild_prompt: Callable[[], str],
    ) -> str | None:
        """Summarise the middle and commit; returns the rebuilt system prompt, or None when
        there is nothing to compact."""
        cooling = self.wall() < session.summary_cooldown_until
        plan = await off_loop(
            len(rows),
            functools.partial(
                plan_compaction,
                rows,
                self.estimator,
                tail_tokens=tail_budget(profile),
                cooling=cooling,
            ),
        )
        split, middle_tokens = plan.split, plan.middle_tokens
        if not split.middle:
            return None
        updates: dict[str, Any] = {}
        if middle_tokens < MIN_MIDDLE_TOKENS:
            # Too small to be worth a call: streak-neutral, but it still arms the verdict,
            # because an incompressible transcript is exactly what the breaker must catch.
            summary = plan.fallback
        elif plan.transcript is None:  # cooling down after failed summaries
            summary = plan.fallback
            updates["fallback_streak"] = session.fallback_streak + 1
        else:
            summary, updates = await self._summarise(session, profile, plan, summarise)
        new_prompt = rebuild_prompt()
        insert = [NewMessage(role="user", content=SUMMARY_SCAFFOLD + summary, kind="summary")]
        insert += plan.tail
        # On the writer thread: re-inserting a long tail is the largest write there is.
        rewrite = functools.partial(
            store.rewrite_live,
            session_id=session.id,
            lease=lease,
            archive_ids=[r.id for r in (*split.middle, *split.tail)],
            insert=insert,
            session_updates={
                **updates,
                "system_prompt": new_prompt,
                "verdict_pending": True,
                "compactions": session.compactions + 1,
                "anchor_rough": None,
                "anchor_billed": None,
                "prune_rearm_at": None,
                "pending_cache_break": "compaction",
            },
        )
        await store.commit_off_loop(rewrite)
        log.info(
            "session %s: compacted %d messages (~%d tokens) into a summary",
            session.id,
            len(split.middle),
            middle_tokens,
        )
        return new_prompt

    async def _summarise(
        self,
        session: SessionRow,
        profile: Profile,
        plan: CompactionPlan,
        summarise: Summariser,
    ) -> tuple[str, dict[str, Any]]:
        """A model summary, or a fallback with the streak and cooldown updates it earns."""
        model = profile.summary_model or profile.model
        assert plan.transcript is not None
        try:
            summary = await model_summary(summarise, model=model, transcript=plan.transcript)
        except SummarySkipped:
            return plan.fallback, {}  # says nothing about the summariser
        except ProviderError as exc:
            log.warning("session %s: summariser failed (%s)", session.id, exc.kind)
            summary = ""
        if summary:
            return summary, {"fallback_streak": 0}
        return plan.fallback, {
            "fallback_streak": session.fallback_streak + 1,
            "summary_cooldown_until": self.wall() + SUMMARY_COOLDOWN_S,
        }


# ---------------------------------------------------------------------- prune rows


def row_text_new(message: NewMessage) -> str:
    text = message.api_content if message.api_content is not None else (message.content or "")
    if message.tool_calls:
        text += json.dumps(list(message.tool_calls))
    return text


def prune_rows(rows: Sequence[StoredMessage], protected: set[int]) -> dict[int, NewMessage]:
    """Replacements (by index) for old rows: deduped and stubbed tool output, shortened
    call arguments that stay valid JSON. Protected (recent) rows are never touched."""
    out: dict[int, NewMessage] = {}
    seen: dict[str, int] = {}
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        if row.id in protected:
            if row.role == "tool":
                seen.setdefault(row_text(row), row.id)
            continue
        if row.role == "tool" and row.kind != "pruned":
            text = row_text(row)
            if text in seen and len(text) > 200:
                stub = (
                    f"[identical to a later result of {row.tool_name}; "
                    f"recall(message_id={row.id}) restores it]"
                )
            elif len(text) > PRUNE_RESULT_CHARS:
                stub = (
                    f"[pruned {len(text):,} chars of {row.tool_name} output to save context; "
                    f"recall(message_id={row.id}) restores it]"
                )
            else:
                seen.setdefault(text, row.id)
                continue
            seen.setdefault(text, row.id)
            out[index] = row.as_new(api_content=stub, kind="pruned")
        elif row.role == "assistant" and row.tool_calls:
            calls = [_shorten_call(c) for c in row.tool_calls]
            if calls != list(row.tool_calls):
                out[index] = row.as_new(tool_calls=calls)
    return out


def _shorten_call(call: dict[str, str]) -> dict[str, str]:
    raw = call.get("arguments", "")
    if len(raw) <= PRUNE_ARGUMENT_CHARS:
        return call
    try:
        args = json.loads(raw)
    except ValueError:
        return call
    if not isinstance(args, dict):
        return call
    short = {
        k: (v[:200] + f"... [{len(v) - 200} chars pruned]")
        if isinstance(v, str) and len(v) > 400
        else v
        for k, v in args.items()
    }
    return {**call, "arguments": json.dumps(short, ensure_ascii=False)}
