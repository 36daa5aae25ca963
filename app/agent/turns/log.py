"""One structured log line per finished turn, in place of uvicorn's access log.

The access log formats a line per HTTP request on the event loop and says nothing a
turn's operator needs (the status of a stream is 200 whether the turn failed or not).
This line says how the turn ended and what it cost, as `key=value` pairs a log shipper
can parse. No prompt text, no tool arguments, no keys: ids and counts only.
"""

from __future__ import annotations

import logging
import time

from app.agent.events import TurnFinished

log = logging.getLogger("courier.turn")


def log_turn(
    *,
    turn_id: str,
    session_id: str,
    profile: str,
    finished: TurnFinished | None,
    started: float,
) -> None:
    """Log the turn's end at INFO; `started` is its `time.monotonic()` at start."""
    if not log.isEnabledFor(logging.INFO):
        return
    elapsed_ms = (time.monotonic() - started) * 1000
    if finished is None:
        log.info(
            "turn=%s session=%s profile=%s exit=cancelled ms=%.0f",
            turn_id,
            session_id,
            profile,
            elapsed_ms,
        )
        return
    usage, cost = finished.usage, finished.cost
    log.info(
        "turn=%s session=%s profile=%s exit=%s error=%s iterations=%d upstream_calls=%d "
        "input_tokens=%d output_tokens=%d cache_read_tokens=%d cost_usd=%s ms=%.0f",
        turn_id,
        session_id,
        profile,
        finished.exit_reason,
        finished.error.code if finished.error else "-",
        finished.iterations,
        finished.upstream_calls,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        cost.amount if cost.amount is not None else "unknown",
        elapsed_ms,
    )
