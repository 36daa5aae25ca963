"""Webhook pieces without a network: the signer against the reference library, the
settings that must refuse to start, the retry schedule, the outbox claim (two deliverers,
one attempt) and the egress policy refusing a loopback target before any connection."""

from __future__ import annotations

import base64
import itertools
import time
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook

from app.config import ConfigError, KeyConfig, load_settings
from app.db import webhook_store as outbox
from app.db.store import Store
from app.webhooks.dispatcher import MAX_DELAY_S, Target, Webhooks, retry_delay
from app.webhooks.signing import signed_headers
from tests.support.store import db_path, store  # noqa: F401  (pytest fixtures)

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
KEY = "unit-key-0123456789abcdef"


@pytest.mark.parametrize("body", [b"{}", '{"id":"evt_1","text":"caf\u00e9"}'.encode()])
def test_the_signature_is_the_reference_librarys(body: bytes) -> None:
    at = 1_700_000_000
    headers = signed_headers(SECRET, msg_id="evt_1", timestamp=at, body=body)
    expected = Webhook(SECRET).sign("evt_1", datetime.fromtimestamp(at, UTC), body.decode())
    assert headers["webhook-signature"] == expected
    assert headers["webhook-id"] == "evt_1" and headers["webhook-timestamp"] == str(at)
    fresh = signed_headers(SECRET, msg_id="evt_1", timestamp=int(time.time()), body=body)
    Webhook(SECRET).verify(body, fresh)  # raises on a mismatch


@pytest.mark.parametrize(
    "webhook",
    [
        {"webhook_url": "https://hooks.example/x"},  # no secret: unsigned events
        {"webhook_secret": SECRET},  # a secret for no URL
        {"webhook_url": "https://hooks.example/x", "webhook_secret": "plain-secret"},
        {
            "webhook_url": "https://hooks.example/x",
            "webhook_secret": "whsec_" + base64.b64encode(b"too short").decode(),
        },
        {"webhook_url": "ftp://hooks.example/x", "webhook_secret": SECRET},
        {"webhook_url": "https://user:pw@hooks.example/x", "webhook_secret": SECRET},
    ],
)
def test_a_webhook_target_that_cannot_work_refuses_to_start(webhook: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="COURIER_WEBHOOK"):
        load_settings(api_key=KEY, **webhook)


def test_a_proper_target_loads() -> None:
    settings = load_settings(
        api_key=KEY, webhook_url="https://hooks.example/x", webhook_secret=SECRET
    )
    assert settings.webhook_secret is not None
    assert settings.webhook_secret.get_secret_value() == SECRET


def test_retries_back_off_to_a_ceiling() -> None:
    delays = [retry_delay(n, 5.0) for n in range(1, 12)]
    assert 4.0 <= delays[0] <= 6.0
    # Six times longer each step: the ±20 % jitter never reorders the growing ones.
    assert all(later > earlier for earlier, later in itertools.pairwise(delays[:6]))
    assert max(delays) <= MAX_DELAY_S * 1.2


def _target(url: str, allow: tuple[str, ...] = ()) -> Target:
    return Target(url=url, secret=SECRET, allow=allow, timeout_s=1, retry_first_s=1, retry_for_s=60)


def test_two_deliverers_claim_one_event_once(store: Store) -> None:  # noqa: F811
    hooks = Webhooks(store, _target("https://hooks.example/x"), per_owner={})
    with store.unit():
        hooks.response_ended(response_id="resp_1", owner="o", status="completed")
        hooks.response_ended(response_id="resp_2", owner="o", status="in_progress")  # none
    now = time.time()
    (event,) = outbox.due(store, now=now)
    first = outbox.claim(store, delivery_id=event, me="a", now=now, hold_s=60)
    second = outbox.claim(store, delivery_id=event, me="b", now=now, hold_s=60)
    assert first is not None and first.attempt == 1 and second is None
    assert outbox.due(store, now=now) == []  # held
    # A claim outlived (its holder died) is taken again, under the same id.
    later = outbox.claim(store, delivery_id=event, me="b", now=now + 61, hold_s=60)
    assert later is not None and later.attempt == 2 and later.body == first.body


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:9/hook", "https://169.254.169.254/latest", "http://10.0.0.1/x"]
)
async def test_egress_refuses_a_forbidden_target_without_connecting(
    store: Store,  # noqa: F811
    url: str,
) -> None:
    hooks = Webhooks(store, _target(url), per_owner={})
    claimed = outbox.Claimed("evt_x", 1, "{}", time.time() + 60, "o")
    status, error = await hooks._post(claimed, hooks.target_of("o"))
    assert status is None
    assert error is not None and error.startswith("egress_refused")


def test_a_keys_own_target_is_checked_the_same_way() -> None:
    with pytest.raises(ValidationError, match="COURIER_WEBHOOK_SECRET"):
        KeyConfig(name="k", key=KEY, webhook_url="https://hooks.example/k", webhook_secret="x")
    with pytest.raises(ValidationError, match="COURIER_WEBHOOK"):
        KeyConfig(name="k", key=KEY, webhook_url="https://hooks.example/k")
    KeyConfig(name="k", key=KEY, webhook_url="https://hooks.example/k", webhook_secret=SECRET)
