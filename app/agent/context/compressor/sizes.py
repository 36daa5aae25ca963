"""How big a request is, roughly, and where compaction starts: the compressor's measures.

A rough count is enough to decide when to act, and cheap enough to take before every
upstream call; the calibration (`calibration.py`) re-anchors it to what the provider bills.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.config import Profile
from app.db.models import SessionRow
from app.db.store import StoredMessage

MEMO_ROWS = 200_000

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
