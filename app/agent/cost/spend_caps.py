"""Which spend caps bind a turn, and what was spent against each before it started.

Built once per turn (two indexed sums at most) so the loop's check before every upstream
call is arithmetic; `app/agent/cost/budget.py` does that check.
"""

from __future__ import annotations

import time
from decimal import Decimal

from app.agent.cost.budget import Cap, SpendGuard
from app.config import Profile, Settings
from app.db.models import SessionRow
from app.db.store import Store
from app.providers.pricing import PriceOverride, price_usage
from app.providers.usage import Usage
from app.security.auth import key_spend_caps

DAY_S = 24 * 3600


def price_override(profile: Profile) -> PriceOverride | None:
    """A profile's configured prices, which win over the catalogue's."""
    p = profile.prices
    if p is None:
        return None
    return PriceOverride(
        input_per_mtok=p.input_per_mtok,
        output_per_mtok=p.output_per_mtok,
        cache_read_per_mtok=p.cache_read_per_mtok,
        cache_write_per_mtok=p.cache_write_per_mtok,
        included=p.included,
    )


class SpendCaps:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        # Hashing every configured key on every request was measurable on the hot path.
        self.key_caps = key_spend_caps(settings.keys)
        self._priced_models: dict[tuple[str, str | None, PriceOverride | None], bool] = {}

    def guard(
        self,
        profile: Profile,
        *,
        owner: str,
        end_user: str,
        session: SessionRow | None,
        request_cap: Decimal | None,
        hard: bool = False,
    ) -> SpendGuard:
        """Every cap that applies to this turn, with what was spent against it so far.
        `end_user`: the app's end user the turn is for ("" for none, whom no end-user cap
        binds: without one the key's own caps are the limit). `hard`: the request cap is
        never passed (`budget.py`)."""
        s = self.settings
        caps: list[Cap] = []
        if request_cap is not None:
            caps.append(Cap("request", request_cap, Decimal(0), hard=hard))
        if s.spend_cap_session_usd is not None:
            spent = Decimal(session.cost_usd) if session else Decimal(0)
            caps.append(Cap("session", s.spend_cap_session_usd, spent))
        # Key caps bill the session's owner, even when an admin key drives the turn.
        # A `[[keys]]` entry's own caps win over the global per-key caps.
        own_total, own_daily = self.key_caps.get(owner, (None, None))
        key_total = own_total if own_total is not None else s.spend_cap_key_usd
        key_daily = own_daily if own_daily is not None else s.spend_cap_key_daily_usd
        if key_total is not None:
            spent, _ = self.store.spent_by_owner(owner=owner)
            caps.append(Cap("API key", key_total, spent))
        if key_daily is not None:
            spent, _ = self.store.spent_by_owner(owner=owner, since=time.time() - DAY_S)
            caps.append(Cap("API key (24h)", key_daily, spent))
        if s.spend_cap_end_user_usd is not None and end_user:
            spent, _ = self.store.spent_by_owner(owner=owner, end_user=end_user)
            caps.append(Cap("end user", s.spend_cap_end_user_usd, spent))
        if not caps:
            return SpendGuard([])
        # Refuse up front when spend cannot be tracked: a cap on an unpriced model would
        # otherwise let a whole upstream call run before the first unknown cost shows up.
        return SpendGuard(caps, allow_unpriced=profile.allow_unpriced, priced=self._priced(profile))

    def _priced(self, profile: Profile) -> bool:
        """Whether the profile's model has a price; memoised (the table does not change
        while we run, and the probe cost more than the rest of the guard)."""
        override = price_override(profile)
        key = (profile.model, profile.provider, override)
        known = self._priced_models.get(key)
        if known is None:
            probe = price_usage(
                Usage(input_tokens=1, output_tokens=1),
                model=profile.model,
                provider=profile.provider,
                override=override,
            )
            known = self._priced_models[key] = probe.status != "unknown"
        return known
