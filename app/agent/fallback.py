"""Fall back to the next profile of a chain when the upstream says this route cannot serve.

The provider's classifier decides whether a failure is worth another route (an outage, an
exhausted key, an unknown model); this module only moves the turn along the profile's
`fallback` chain. The same request goes to the next route with the iteration refunded, so
the fallback gets a fair turn instead of inheriting a budget the failure spent.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from app.providers.base import ProviderError

if TYPE_CHECKING:
    from app.agent.turn_context import TurnContext, TurnState

log = logging.getLogger(__name__)

ROUTE_FIELDS = (
    "name",
    "provider",
    "base_url",
    "api_key",
    "model",
    "context_window",
    "max_output_tokens",
    "cache_markers",
    "cache_ttl",
    "cache_ttl_supported",
    "cache_strategy",
    "upstream_timeout_s",
    "retry_attempts",
    "retry_base_delay_s",
    "prices",
    "allow_unpriced",
    "summary_model",
    "prefill",
)
"""What a fallback profile changes: where and how the request goes. Tools, workspace,
instructions and budgets stay the session's own, so its transcript stays valid."""


def fall_back(ctx: TurnContext, state: TurnState, exc: ProviderError) -> TurnContext | None:
    """The turn's context on its next route if the failure hints so; None: no fallback.

    Nothing of the failed call may have been streamed: a second route would repeat it.
    """
    if not ctx.fallbacks or not exc.should_fall_back or state.in_flight.events:
        return None
    route = ctx.fallbacks[0]
    log.warning(
        "turn %s: %s failed (%s); falling back to %s",
        ctx.turn_id,
        ctx.profile.name,
        exc.kind,
        route.profile.name,
    )
    if not state.routes:
        state.routes = (ctx.profile.name,)
    state.routes = (*state.routes, route.profile.name)
    update = {name: getattr(route.profile, name) for name in ROUTE_FIELDS}
    return replace(
        ctx,
        profile=ctx.profile.model_copy(update=update),
        provider=route.provider,
        price_override=route.price,
        fallbacks=ctx.fallbacks[1:],
    )
