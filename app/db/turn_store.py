"""SQL for the turns route: each turn of a session with how it ended and what it cost.

The turn table knows why a turn ended; the usage ledger knows its upstream calls. One
read joins them in Python, because costs are exact decimals stored as text: summing them
in SQL would round them through floats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from sqlalchemy import Engine, bindparam, text


@dataclass
class TurnSummary:
    id: str
    started_at: float
    finished_at: float | None
    exit_reason: str | None
    iterations: int
    error: str | None
    upstream_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    known_cost: Decimal = Decimal(0)
    unpriced_calls: int = 0
    profiles: list[str] = field(default_factory=list)
    """Profiles that served the turn's calls, in first-use order (more than one: it fell back)."""

    @property
    def cost_usd(self) -> str | None:
        # A partial sum is not a cost: any unpriced call makes the total unknown.
        return str(self.known_cost) if self.unpriced_calls == 0 else None


_CALLS = text(
    "SELECT turn_id, profile, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, reasoning_tokens, cost_usd, cost_status FROM api_call "
    "WHERE session_id = :sid AND turn_id IN :ids ORDER BY id"
).bindparams(bindparam("ids", expanding=True))


def session_turns(
    engine: Engine, *, session_id: str, limit: int, offset: int
) -> tuple[list[TurnSummary], int]:
    """A page of the session's turns, oldest first, and how many there are in all."""
    with engine.connect() as conn:
        total = conn.execute(
            text("SELECT COUNT(*) FROM turn WHERE session_id = :sid"), {"sid": session_id}
        ).scalar_one()
        rows = conn.execute(
            text(
                "SELECT id, started_at, finished_at, exit_reason, iterations, error FROM turn "
                "WHERE session_id = :sid ORDER BY started_at, id LIMIT :limit OFFSET :offset"
            ),
            {"sid": session_id, "limit": limit, "offset": offset},
        ).all()
        turns = {r[0]: TurnSummary(*r) for r in rows}
        params = {"sid": session_id, "ids": list(turns)}
        calls = conn.execute(_CALLS, params).all() if turns else []
    for turn_id, profile, inp, out, read, write, reasoning, cost, status in calls:
        turn = turns[turn_id]
        turn.upstream_calls += 1
        turn.input_tokens += inp
        turn.output_tokens += out
        turn.cache_read_tokens += read
        turn.cache_write_tokens += write
        turn.reasoning_tokens += reasoning
        # The same rule as the session's roll-up, so the turns add up to its totals.
        if cost is not None:
            turn.known_cost += Decimal(cost)
        elif status == "unknown":
            turn.unpriced_calls += 1
        if profile not in turn.profiles:
            turn.profiles.append(profile)
    return list(turns.values()), int(total)


def unfinished_turns(engine: Engine) -> list[tuple[str, str, bool]]:
    """(turn id, session id, is the session's newest turn) for every turn that never
    recorded its end: at startup, exactly the turns a dead process left running."""
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT t.id, t.session_id, NOT EXISTS (SELECT 1 FROM turn n "
                "WHERE n.session_id = t.session_id AND n.started_at > t.started_at) "
                "FROM turn t WHERE t.finished_at IS NULL ORDER BY t.started_at"
            )
        ).all()
    return [(str(r[0]), str(r[1]), bool(r[2])) for r in rows]
