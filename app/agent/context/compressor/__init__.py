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

The pieces, one module each: `sizes` (rough counts, thresholds, the estimator),
`calibration` (the anchor and the verdict), `breaker`, `splitting` (head, middle, tail),
`summaries` (the model's or the fallback's), `pruning` (the prune's rewrites) and
`compressor` (the `Compressor` that decides and commits). The names below are the ones
used outside the package.
"""

from app.agent.context.compressor.breaker import BLOCK_WINDOW_S
from app.agent.context.compressor.calibration import observe_response
from app.agent.context.compressor.compressor import MIN_RECLAIM, OVERFLOW_RETRIES, Compressor
from app.agent.context.compressor.sizes import (
    Estimator,
    rough_tokens,
    tail_budget,
    threshold_tokens,
)
from app.agent.context.compressor.splitting import split_for_compaction
from app.agent.context.compressor.summaries import (
    SUMMARISER_SYSTEM,
    SUMMARY_SCAFFOLD,
    Summariser,
    SummarySkipped,
)

__all__ = [
    "BLOCK_WINDOW_S",
    "MIN_RECLAIM",
    "OVERFLOW_RETRIES",
    "SUMMARISER_SYSTEM",
    "SUMMARY_SCAFFOLD",
    "Compressor",
    "Estimator",
    "Summariser",
    "SummarySkipped",
    "observe_response",
    "rough_tokens",
    "split_for_compaction",
    "tail_budget",
    "threshold_tokens",
]
