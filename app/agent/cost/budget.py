"""Spend caps, checked in one place before every upstream call.

The check compares what has already been spent against each cap, adding nothing
optimistic for the call about to be made: an estimate of that call's cost would either
stop runs early or let them overshoot, and only billed figures are defensible.

A hard cap (a scheduled job's `max_cost_usd`) must never be passed, so it also admits
each call against an upper bound of its cost (`call_bound.py`): the call's output is
clamped to what the headroom affords, or the call is refused before it is sent. The
bound is reserved while the call runs and released when its billed cost is added; a call
whose cost is unknown, or that failed mid-stream, counts its whole bound.
"""

from __future__ import annotations

from collections.abc import Callable
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
    hard: bool = False
    """Stop before the call that would pass it, not after (see the module doc)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """A call admitted under a hard cap: the output limit it must carry, what it reserved."""

    max_tokens: int
    reserved: Decimal


def spend_limit_error(message: str) -> TurnError:
    return TurnError(message=message, type="insufficient_quota", code="spend_limit_reached")


class SpendGuard:
    def __init__(
        self, caps: list[Cap], *, allow_unpriced: bool = False, priced: bool = True
    ) -> None:
        self.caps = caps
        self.allow_unpriced = allow_unpriced
        self.spent_in_turn = Decimal(0)
        self.reserved = Decimal(0)
        """The bounds of admitted calls still running (several may run at once)."""
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

    @property
    def hard(self) -> bool:
        return any(cap.hard for cap in self.caps)

    def headroom(self) -> Decimal | None:
        """What the tightest hard cap still allows, reservations counted; None without one."""
        left = [
            cap.limit - cap.spent_before - self.spent_in_turn - self.reserved
            for cap in self.caps
            if cap.hard
        ]
        return min(left) if left else None

    def admit(
        self,
        price: Callable[[int], Decimal | None],
        affordable: Callable[[Decimal], int],
        *,
        max_tokens: int,
        min_tokens: int,
    ) -> Admission | TurnError | None:
        """Admit a call whose cost with `n` output tokens is at most `price(n)` under the
        hard caps: None when none applies; an `Admission` with `max_tokens` clamped to
        what `affordable(headroom)` allows; the refusal when that is under `min_tokens`."""
        headroom = self.headroom()
        if headroom is None:
            return None
        whole = price(max_tokens)
        if whole is None:
            return spend_limit_error("a hard spend cap applies but this model's price is unknown")
        if whole <= headroom:
            self.reserved += whole
            return Admission(max_tokens, whole)
        clamped = affordable(headroom)
        cost = price(clamped) if clamped >= min_tokens else None
        if cost is None:
            left = max(headroom, Decimal(0))
            return spend_limit_error(
                f"the next call could cost up to ${whole:.6f} ({max_tokens} output tokens) "
                f"and not even {min_tokens} output tokens fit in the ${left:.6f} left "
                "under the hard spend cap"
            )
        self.reserved += cost
        return Admission(clamped, cost)

    def settle(self, admission: Admission, *, billed: Cost | None, lost: bool = False) -> None:
        """Release a call's reservation once its `billed` cost was added (`add`). A cost
        that is unknown, or lost (the call failed after its first byte, so it may be billed
        without our seeing the usage) counts the whole bound: worst case, never a hole."""
        self.reserved -= admission.reserved
        if lost or (billed is not None and billed.amount is None):
            self.spent_in_turn += admission.reserved


class HardCapReached(Exception):
    """The next upstream call could pass a hard spend cap, so it is not sent."""

    def __init__(self, error: TurnError) -> None:
        super().__init__(error.message)
        self.error = error
