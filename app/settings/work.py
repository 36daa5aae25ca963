"""Settings of work that outlives its client: background responses, their webhooks, and
scheduled jobs. A mixin of `Settings` (same `COURIER_` names), kept apart so
`app/config.py` stays under the module size limit.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import NoDecode


class WorkSettings(BaseModel):
    background: bool = True
    """Accept Responses requests with `background: true` (docs/background.md); off: 400."""
    response_event_flush_s: float = Field(default=1.0, gt=0, le=60)
    """How often running background responses' new events are stored (one commit for all)."""
    webhook_url: str | None = None
    """Where background responses' ends are announced, signed (docs/background.md)."""
    webhook_secret: SecretStr | None = None
    """`whsec_` + base64 of at least 24 random bytes: both reference verifiers read it alike."""
    webhook_allow_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    """Loopback/private `host:port` (or CIDR) the URL may reach; the only plain-http hosts."""
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=120)
    webhook_retry_first_s: float = Field(default=5.0, gt=0, le=3600)
    """The first retry's wait; each next one 6 times longer (at most 8 h), jittered."""
    webhook_retry_for_s: float = Field(default=86_400.0, gt=0)
    jobs: bool = True
    """Serve `/v1/jobs` and run the scheduler (docs/jobs.md); off: the routes answer 404."""
    job_default_max_cost_usd: Decimal | None = Field(default=None, gt=0)
    """A job's hard cost cap when its creator names none; unset: `max_cost_usd` is required."""
    job_min_interval_s: int = Field(default=60, ge=1)
    """The shortest gap a job's schedule may have between two ticks."""
    scheduler_tick_s: float = Field(default=10.0, gt=0, le=3600)
    """The longest the scheduler sleeps between looks for due jobs (a new or edited job,
    or one run now, wakes it at once)."""


def webhook_problem(url: str | None, secret: SecretStr | None) -> str | None:
    """What is wrong with a webhook target: a URL without a secret sends unsigned events; a
    secret not `whsec_<base64>` is read differently by the two reference verifiers."""
    if url is None or secret is None:
        return None if (url, secret) == (None, None) else "set both COURIER_WEBHOOK_URL and _SECRET"
    parsed = urlsplit(url)
    if parsed.scheme not in ("https", "http") or not parsed.hostname or "@" in parsed.netloc:
        return "COURIER_WEBHOOK_URL must be an http(s) URL without a user or password"
    raw = secret.get_secret_value()
    try:
        key = base64.b64decode(raw.removeprefix("whsec_"), validate=True)
    except ValueError:
        key = b""
    if not raw.startswith("whsec_") or len(key) < 24:
        return "COURIER_WEBHOOK_SECRET must be whsec_ + the base64 of 24 or more random bytes"
    return None
