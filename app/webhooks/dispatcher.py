"""The webhook outbox's two ends: `response_ended` enqueues an event inside the unit that
records the response's end, and the dispatcher delivers the queued events at least once,
across restarts, each attempt signed afresh under the same `webhook-id`.

Delivery goes through the egress policy as `web_fetch` does: the URL's host is resolved
and checked at every attempt (loopback, private and metadata addresses refused unless
`COURIER_WEBHOOK_ALLOW_HOSTS` names them), and the request goes to the checked address
(Host and SNI carry the name), so a DNS answer that changes between check and connect
cannot redirect it. Redirects are not followed; a receiver's body is read up to 4 KiB and
dropped. Anything but a 2xx is retried with backoff until `COURIER_WEBHOOK_RETRY_FOR_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import httpx

from app.db import webhook_store as outbox
from app.db.store import Store
from app.db.webhook_models import WebhookAttemptRow, WebhookDeliveryRow
from app.security.ssrf import (
    AllowList,
    SSRFError,
    normalise_host,
    parse_ip_literal,
    resolve_and_check,
)
from app.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

RESPONSE_EVENTS = {
    "completed": "response.completed",
    "failed": "response.failed",
    "cancelled": "response.cancelled",
    "incomplete": "response.incomplete",
}
"""A background response's terminal status and the event OpenAI names for it."""
USER_AGENT = "Courier-Webhooks/1"
POLL_S = 10.0
"""Longest sleep between looks at the outbox (events due later, another process's)."""
CLAIM_S = 60.0
"""How long one attempt holds its event; a deliverer dead mid-attempt frees it after this."""
MAX_DELAY_S = 8 * 3600.0
READ_LIMIT = 4096


@dataclass(frozen=True, slots=True)
class Target:
    """Where events go and how persistently, from the settings (read once at startup;
    built by `app/main.py`, since `app/config.py` checks targets with this package)."""

    url: str
    secret: str
    allow: tuple[str, ...]
    timeout_s: float
    retry_first_s: float
    retry_for_s: float


def retry_delay(attempt: int, first_s: float) -> float:
    """The wait after failed attempt `attempt` (from 1): 6 times the last, at most 8 h,
    jittered by ±20 % so receivers back from an outage are not hit all at once."""
    delay: float = min(first_s * 6 ** (attempt - 1), MAX_DELAY_S)
    return delay * random.uniform(0.8, 1.2)


class Webhooks:
    def __init__(
        self, store: Store, default: Target | None, *, per_owner: Mapping[str, Target]
    ) -> None:
        self.store = store
        self.default = default
        """COURIER_WEBHOOK_URL's target: every key's without one of its own."""
        self.per_owner = dict(per_owner)
        """The targets of keys with their own (`[[keys]]` `webhook_url`), by owner."""
        self.me = "deliverer_" + secrets.token_hex(6)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def response_ended(self, *, response_id: str, owner: str, status: str) -> None:
        """Enqueue the event for a background response's end, in the caller's unit. The
        payload carries ids only (OpenAI's shape): never text, arguments or secrets."""
        kind = RESPONSE_EVENTS.get(status)
        target = self.target_of(owner)
        if kind is None or target is None:
            return
        now = time.time()
        event_id = "evt_" + secrets.token_hex(16)
        body = {
            "id": event_id,
            "object": "event",
            "type": kind,
            "created_at": int(now),
            "data": {"id": response_id},
        }
        outbox.enqueue(
            self.store,
            WebhookDeliveryRow(
                id=event_id,
                owner=owner,
                event_type=kind,
                body=json.dumps(body, separators=(",", ":")),
                next_attempt_at=now,
                created_at=now,
                give_up_at=now + target.retry_for_s,
            ),
        )

    def target_of(self, owner: str) -> Target | None:
        """A response's webhook goes to its owner key's target."""
        return self.per_owner.get(owner, self.default)

    def wake(self) -> None:
        """An event was committed: deliver it now rather than at the next poll."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-dispatcher")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        if released := await self._in_unit(partial(outbox.release_claims, self.store)):
            log.warning(
                "webhooks: %d event(s) a previous process was delivering go again", released
            )
        while True:
            self._wake.clear()  # before looking: a wake during the look is not lost
            try:
                await self.deliver_due()
            except Exception:
                log.exception("webhooks: delivery round failed")
            wait = POLL_S
            upcoming = await self.store.off_loop(partial(outbox.next_due_at, self.store))
            if upcoming is not None:
                wait = min(POLL_S, max(0.0, upcoming - time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def deliver_due(self) -> None:
        ids = await self.store.off_loop(partial(outbox.due, self.store, now=time.time()))
        for delivery_id in ids:
            await self._deliver(delivery_id)

    async def _in_unit(self, work: partial[int]) -> int:
        def unit() -> int:
            with self.store.unit():
                return work()

        return await self.store.off_loop(unit)

    async def _deliver(self, delivery_id: str) -> None:
        now = time.time()
        claim = partial(
            outbox.claim, self.store, delivery_id=delivery_id, me=self.me, now=now, hold_s=CLAIM_S
        )
        claimed = await self.store.off_loop(claim)
        if claimed is None:
            return  # another deliverer has it, or it is no longer pending
        started = time.monotonic()
        # The target as configured now: a key's target changed by a restart is honoured.
        target = self.target_of(claimed.owner)
        status, error = await self._post(claimed, target)
        delivered = status is not None and 200 <= status < 300
        first_s = target.retry_first_s if target is not None else MAX_DELAY_S
        next_at = time.time() + retry_delay(claimed.attempt, first_s)
        state = "delivered" if delivered else "pending"
        if not delivered and (target is None or next_at > claimed.give_up_at):
            state = "failed"
            log.warning("webhooks: gave up on %s after %d attempts", delivery_id, claimed.attempt)
        attempt = WebhookAttemptRow(
            delivery_id=delivery_id,
            attempt=claimed.attempt,
            at=now,
            url=target.url if target is not None else "",
            status=status,
            error=error,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

        def record() -> None:
            with self.store.unit():
                outbox.record_attempt(
                    self.store, attempt, me=self.me, state=state, next_attempt_at=next_at
                )

        await self.store.off_loop(record)

    async def _post(
        self, claimed: outbox.Claimed, target: Target | None
    ) -> tuple[int | None, str | None]:
        """(status, None) for an answer, (status, why) for a non-2xx, (None, why) for none."""
        if target is None:
            return None, "no_target: the key's webhook is no longer configured"
        url = httpx.URL(target.url)
        port = url.port or (443 if url.scheme == "https" else 80)
        if url.scheme != "https" and not _allowed_plain(url.host, port, target.allow):
            return None, "egress_refused: plain http to a host not in COURIER_WEBHOOK_ALLOW_HOSTS"
        try:
            addresses = await resolve_and_check(url.host, port, allow=target.allow)
        except SSRFError as exc:
            return None, f"egress_refused: {exc}"
        body = claimed.body.encode()
        headers = {
            "Host": url.netloc.decode("ascii"),
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            **signed_headers(
                target.secret,
                msg_id=claimed.delivery_id,
                timestamp=int(time.time()),
                body=body,
            ),
        }
        for address in addresses:
            try:
                status = await self._send(url, address, headers, body, target.timeout_s)
            except (httpx.ConnectError, httpx.ConnectTimeout):
                continue  # the host's next checked address
            except httpx.TimeoutException:
                return None, "timeout"
            except httpx.HTTPError as exc:
                return None, f"http_error: {type(exc).__name__}"
            return status, None if 200 <= status < 300 else f"status {status}"
        return None, "connect_error"

    @staticmethod
    async def _send(
        url: httpx.URL, address: str, headers: dict[str, str], body: bytes, timeout_s: float
    ) -> int:
        extensions: dict[str, object] = {"timeout": httpx.Timeout(timeout_s).as_dict()}
        if url.scheme == "https":
            extensions["sni_hostname"] = url.host  # TLS still proves the name we checked
        request = httpx.Request(
            "POST",
            url.copy_with(host=address),
            headers=headers,
            content=body,
            extensions=extensions,
        )
        # A bare transport: no redirects followed, no proxy from the environment (which
        # would resolve the name again, undoing the pin), no pooled connection shared.
        async with httpx.AsyncHTTPTransport(retries=0) as transport:
            response = await transport.handle_async_request(request)
            try:
                read = 0
                async for chunk in response.aiter_raw():
                    read += len(chunk)
                    if read >= READ_LIMIT:
                        break
            finally:
                await response.aclose()
            return response.status_code


def _allowed_plain(host: str, port: int, allow: tuple[str, ...]) -> bool:
    """Plain `http` only to a host the operator named (a receiver on the same machine)."""
    rules = AllowList.parse(allow)
    literal = parse_ip_literal(host)
    if literal is not None:
        return rules.allows_address(literal, port) or rules.in_networks(literal, port)
    return rules.allows_name(normalise_host(host), port)
