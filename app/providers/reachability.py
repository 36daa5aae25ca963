"""A cheap reachability probe of a profile's upstream, for `/health/ready`.

It sends one unauthenticated GET to the base URL and counts any HTTP answer (401 and 404
included) as reachable: a real model call would cost tokens on every probe, and a readiness
check that spends money every ten seconds is one operators switch off.
"""

from __future__ import annotations

import httpx

from app.providers.factory import DEFAULT_BASE_URLS

PROBE_TIMEOUT_S = 2.0


async def probe_upstream(provider: str, base_url: str | None) -> str | None:
    """None when the upstream answered; otherwise a short reason without the URL's secrets."""
    url = base_url or DEFAULT_BASE_URLS[provider]
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            await client.get(url)
    except httpx.TimeoutException:
        return f"upstream did not answer within {PROBE_TIMEOUT_S:g} s"
    except httpx.HTTPError as exc:
        return f"upstream unreachable ({type(exc).__name__})"
    return None
