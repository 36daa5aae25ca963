"""Spend caps, checked in one place before every upstream call.

The check compares what has already been spent against each cap, adding nothing
optimistic for the call about to be made: an estimate of that call's cost would either
stop runs early or let them overshoot, and only billed figures are defensible.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from app.agent.events import TurnError
from app.providers.pricing import Cost


@dataclass(frozen=True, slots=True)
class Cap:
    name: str
    """Which cap, for the error message: request, session, key, key (24h), end user."""
    limit: Decimal
    spent_before: Decimal
    """What had been spent against this cap before the turn started."""


def spend_limit_error(message: str) -> TurnError:
    return TurnError(message=message, type="insufficient_quota", code="spend_limit_reached")


class SpendGuard:
    def __init__(
        self, caps: list[Cap], *, allow_unpriced: bool = False, priced: bool = True
    ) -> None:
        self.caps = caps
        self.allow_unpriced = allow_unpriced
        self.spent_in_turn = Decimal(0)
        self.unpriced = not priced

    def add(self, cost: Cost) -> None:
        if cost.amount is None:
            self.unpriced = self.unpriced or cost.status == "unknown"
        else:
            self.spent_in_turn += cost.amount

    def check(self) -> TurnError | None:
        if self.caps and self.unpriced and not self.allow_unpriced:
            return TurnError(
                message=(
                    "a spend cap applies but this model's price is unknown, so spend cannot "
                    "be tracked; configure prices for the profile or set allow_unpriced"
                ),
                type="insufficient_quota",
                code="spend_limit_unpriced",
            )
        for cap in self.caps:
            spent = cap.spent_before + self.spent_in_turn
            if spent >= cap.limit:
                return spend_limit_error(
                    f"{cap.name} spend limit of ${cap.limit} reached (spent ${spent:.6f})"
                )
        return None
