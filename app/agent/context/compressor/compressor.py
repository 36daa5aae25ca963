"""The Compressor: the process-wide part of keeping sessions inside their windows.

It decides when to compact (the calibrated trigger, behind the breaker) and commits the
prune and the compaction; what it remembers between calls is a memo of row sizes, running
sums per session and the breaker's deadlines. Everything durable is on the session row.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.agent.context.cache_planner import StablePrefixRegistry
from app.agent.context.compressor.breaker import Breaker
from app.agent.context.compressor.pruning import prune_rows, row_text_new
from app.agent.context.compressor.sizes import (
    Estimator,
    projected,
    rough_tokens,
    tail_budget,
    threshold_tokens,
)
from app.agent.context.compressor.splitting import split_for_compaction
from app.agent.context.compressor.summaries import (
    MIN_MIDDLE_TOKENS,
    SUMMARY_SCAFFOLD,
    CompactionPlan,
    Summariser,
    SummarySkipped,
    model_summary,
    plan_compaction,
)
from app.config import Profile
from app.db.models import SessionRow
from app.db.store import NewMessage, Store, StoredMessage
from app.observe.loop_passes import note as note_pass
from app.observe.loop_passes import off_loop
from app.providers.base import ProviderError

log = logging.getLogger(__name__)

MIN_RECLAIM = 4_096
"""A prune commits only if it frees this many tokens: smaller wins are not worth a break."""
SUMMARY_COOLDOWN_S = 300.0
SUMS_KEPT = 4_096
OVERFLOW_RETRIES = 3


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
