"""Webhooks for background responses over HTTP: a real server, the simulator, and a
receiver on 127.0.0.1. Every delivery verifies with the reference library
(`standardwebhooks`) and with the openai SDK's `webhooks.unwrap`; a 500 is retried under
the same `webhook-id`, signed afresh; a sender killed mid-attempt delivers after its
restart; a target outside the egress policy is never contacted."""

from __future__ import annotations

import base64
import sqlite3
from typing import Any

import openai
from standardwebhooks import Webhook

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.waiting import wait_for
from tests.support.webhook_receiver import (  # noqa: F401  (pytest fixture)
    Receiver,
    receiver,
    receiving,
)

SECRET = "whsec_" + base64.b64encode(b"courier-webhook-test-secret-32by").decode()


def _db(server: Server, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return list(con.execute(query))
    finally:
        con.close()


def _server(servers: ServerFactory, receiver: Receiver, **extra: str) -> Server:  # noqa: F811
    settings = {
        "COURIER_WEBHOOK_URL": receiver.url,
        "COURIER_WEBHOOK_SECRET": SECRET,
        "COURIER_WEBHOOK_ALLOW_HOSTS": f"127.0.0.1:{receiver.port}",
        "COURIER_WEBHOOK_RETRY_FIRST_S": "0.2",
        **extra,
    }
    return servers(**settings)


def _client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=server.api_key, max_retries=0)


def _verified(received: Any) -> dict[str, Any]:
    """The event, checked by both reference verifiers on the exact bytes received."""
    payload: dict[str, Any] = Webhook(SECRET).verify(received.body, received.headers)
    event = openai.OpenAI(api_key="unused", webhook_secret=SECRET).webhooks.unwrap(
        received.body, received.headers
    )
    assert event.id == payload["id"] == received.headers["webhook-id"]
    return payload


def test_a_completed_background_response_is_announced_and_a_500_is_retried(
    sim: Simulator,
    servers: ServerFactory,
    receiver: Receiver,  # noqa: F811
) -> None:
    receiver.answer(500)
    server = _server(servers, receiver)
    sim.script([{"reply": {"text": "announced"}}])
    created = _client(server).responses.create(model="courier", input="x", background=True)
    wait_for(lambda: len(receiver.received) == 2)
    first, second = (_verified(r) for r in receiver.received)
    assert first == second  # the same event, the same bytes
    assert first["type"] == "response.completed"
    assert first["data"] == {"id": created.id}
    assert first["object"] == "event"
    assert set(first) == {"id", "object", "type", "created_at", "data"}  # ids only, no text
    # One id for both attempts, each signed on its own.
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert ids == {first["id"]}
    assert receiver.received[0].headers["user-agent"] == "Courier-Webhooks/1"
    wait_for(lambda: _db(server, "SELECT state FROM webhook_delivery") == [("delivered",)])
    attempts = _db(server, "SELECT attempt, status, error FROM webhook_attempt ORDER BY attempt")
    assert attempts == [(1, 500, "status 500"), (2, 200, None)]
    # Another secret does not verify these bodies.
    other = "whsec_" + base64.b64encode(b"another-secret-of-32-bytes-long!").decode()
    try:
        Webhook(other).verify(receiver.received[1].body, receiver.received[1].headers)
    except Exception as exc:  # the library's own verification error
        assert "signature" in str(exc).lower()
    else:
        raise AssertionError("another secret verified the event")


def test_an_event_left_mid_attempt_by_a_crash_is_delivered_after_the_restart(
    sim: Simulator,
    servers: ServerFactory,
    receiver: Receiver,  # noqa: F811
) -> None:
    receiver.hold_first()
    server = _server(servers, receiver)
    sim.script([{"reply": {"text": "crash while announcing"}}])
    created = _client(server).responses.create(model="courier", input="x", background=True)
    wait_for(lambda: len(receiver.received) == 1)
    server.kill()  # mid-attempt: the receiver has not answered
    receiver.first_answer.set()
    assert _db(server, "SELECT state FROM webhook_delivery") == [("pending",)]
    server.start()
    wait_for(lambda: len(receiver.received) == 2)
    events = [_verified(r) for r in receiver.received]
    assert events[0]["id"] == events[1]["id"]
    assert events[1]["data"] == {"id": created.id}
    wait_for(lambda: _db(server, "SELECT state FROM webhook_delivery") == [("delivered",)])


def test_a_target_outside_the_egress_policy_is_never_contacted(
    sim: Simulator,
    servers: ServerFactory,
    receiver: Receiver,  # noqa: F811
) -> None:
    server = _server(servers, receiver, COURIER_WEBHOOK_ALLOW_HOSTS="")
    sim.script([{"reply": {"text": "nobody hears this"}}])
    _client(server).responses.create(model="courier", input="x", background=True)
    wait_for(lambda: len(_db(server, "SELECT 1 FROM webhook_attempt")) >= 2)
    errors = {e for (e,) in _db(server, "SELECT error FROM webhook_attempt")}
    assert all(e.startswith("egress_refused") for e in errors), errors
    assert receiver.received == []


def test_a_key_with_its_own_target_gets_its_responses_events_under_its_secret(
    sim: Simulator,
    servers: ServerFactory,
    receiver: Receiver,  # noqa: F811
    tmp_path: Any,
) -> None:
    own_secret = "whsec_" + base64.b64encode(b"the-own-key-webhook-secret-32by!").decode()
    own_key = "own-key-0123456789abcdef"
    with receiving() as own:
        config = tmp_path / "keys.toml"
        config.write_text(
            f'[[keys]]\nname = "own"\nkey = "{own_key}"\nscopes = ["chat"]\n'
            f'webhook_url = "{own.url}"\nwebhook_secret = "{own_secret}"\n'
        )
        allow = f"127.0.0.1:{receiver.port},127.0.0.1:{own.port}"
        server = _server(
            servers, receiver, COURIER_CONFIG=str(config), COURIER_WEBHOOK_ALLOW_HOSTS=allow
        )
        sim.script([{"reply": {"text": "default's"}}, {"reply": {"text": "own's"}}])
        default = _client(server).responses.create(model="courier", input="a", background=True)
        mine = openai.OpenAI(
            base_url=f"{server.base_url}/v1", api_key=own_key, max_retries=0
        ).responses.create(model="courier", input="b", background=True)
        wait_for(lambda: len(receiver.received) == 1 and len(own.received) == 1)
        assert _verified(receiver.received[0])["data"] == {"id": default.id}
        got = own.received[0]
        assert Webhook(own_secret).verify(got.body, got.headers)["data"] == {"id": mine.id}
        try:  # the default secret does not verify the key's event
            Webhook(SECRET).verify(got.body, got.headers)
        except Exception as exc:
            assert "signature" in str(exc).lower()
        else:
            raise AssertionError("the default secret verified another key's event")


def test_a_webhook_url_without_a_proper_secret_refuses_to_start(
    servers: ServerFactory,
    receiver: Receiver,  # noqa: F811
) -> None:
    for secret in ("", "not-whsec", "whsec_" + base64.b64encode(b"short").decode()):
        server = servers(start=False, COURIER_WEBHOOK_URL=receiver.url)
        if secret:
            server.env["COURIER_WEBHOOK_SECRET"] = secret
        try:
            server.start(timeout=30)
        except RuntimeError as exc:
            assert "COURIER_WEBHOOK" in str(exc)
        else:
            raise AssertionError(f"started with webhook secret {secret!r}")
