"""No upstream request ever carries the server's own secrets (issue 28), over HTTP.

The simulator plays a hostile model in its scratch workspace. Its recorded request bodies
are searched for every secret the server holds, raw and in base64 at every alignment.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from openai import BadRequestError, OpenAI

from tests.support.approvals import call
from tests.support.server import Server, sim_env
from tests.support.sim import Simulator

UPSTREAM_KEY = "sim-upstream-key-7c1e5a9b3d"
SECOND_UPSTREAM_KEY = "sim-upstream-key-2-4f8a6c0e2b"
ADMIN_KEY = "admin-key-5d3c1b9a7e6f4d2c"
METRICS_KEY = "metrics-key-8e6c4a2f0d9b7c5a"
TOKEN_SECRET = "token-secret-0123456789abcdef0123456789abcdef"


def _env(simulator: Simulator, **extra: str) -> dict[str, str]:
    return sim_env(
        simulator.base_url,
        COURIER_UPSTREAM_API_KEY=UPSTREAM_KEY,
        COURIER_UPSTREAM_API_KEYS=SECOND_UPSTREAM_KEY,
        COURIER_ADMIN_API_KEY=ADMIN_KEY,
        COURIER_METRICS_API_KEY=METRICS_KEY,
        COURIER_TOKENS_ENABLED="1",
        COURIER_TOKEN_SECRET=TOKEN_SECRET,
        **extra,
    )


def secrets_of(server: Server) -> list[str]:
    return [server.api_key, UPSTREAM_KEY, SECOND_UPSTREAM_KEY, ADMIN_KEY, METRICS_KEY, TOKEN_SECRET]


def _encodings(secret: str) -> list[str]:
    """The secret raw and as base64 wherever it sits in a longer stream (a middle piece of
    each of the three alignments, in both alphabets): checked here independently of the
    server's own scan."""
    raw = secret.encode()
    found = [secret]
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            found.append(encode(b"\0" * shift + raw).decode()[4:-4])
    return found


def assert_no_secret_sent(sim: Simulator, server: Server) -> None:
    bodies = [r["body"] for r in sim.requests()]
    for secret in secrets_of(server):
        for form in _encodings(secret):
            leaked = [i for i, body in enumerate(bodies) if form in body]
            assert not leaked, f"request(s) {leaked} carried a server secret ({form[:6]}...)"


@pytest.fixture(scope="module")
def server(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(data_dir=tmp_path_factory.mktemp("data"), env=_env(simulator)).start()
    yield srv
    srv.stop()


def _client(server: Server) -> OpenAI:
    return OpenAI(base_url=f"{server.base_url}/v1", api_key=server.api_key, max_retries=0)


# ------------------------------------------------------------------ the last line


@pytest.mark.parametrize("secret", [UPSTREAM_KEY, TOKEN_SECRET])
def test_a_client_message_with_a_server_secret_is_not_sent(
    server: Server, sim: Simulator, secret: str
) -> None:
    sim.script([{"reply": {"text": "never asked"}}])
    with pytest.raises(BadRequestError) as caught:
        _client(server).chat.completions.create(
            model="courier",
            messages=[{"role": "user", "content": f"remember this: {secret}"}],
        )
    assert caught.value.status_code == 400
    error = caught.value.body
    assert isinstance(error, dict) and error["code"] == "secret_in_request"
    assert secret not in json.dumps(error)
    assert sim.requests() == []  # nothing reached the upstream


def test_a_streamed_turn_gets_the_error_inside_the_stream(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "never asked"}}])
    encoded = base64.b64encode(f"key={ADMIN_KEY};".encode()).decode()
    body = {
        "model": "courier",
        "stream": True,
        "messages": [{"role": "user", "content": f"decode {encoded}"}],
    }
    with httpx.stream(
        "POST", f"{server.base_url}/v1/chat/completions", json=body, headers=server.headers()
    ) as resp:
        text = "".join(resp.iter_text())
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    errors = [e["error"] for e in events if "error" in e]
    assert [e["code"] for e in errors] == ["secret_in_request"]
    assert "data: [DONE]" in text
    assert sim.requests() == []


def test_a_tool_result_that_escaped_redaction_ends_the_turn_closed(
    server: Server, sim: Simulator
) -> None:
    # The command spells the base64 in two halves; only its output holds it whole, and
    # base64 is no shape the redactor knows.
    encoded = base64.b64encode(UPSTREAM_KEY.encode()).decode()
    half = len(encoded) // 2
    command = f"printf %s {encoded[:half]}; printf %s {encoded[half:]}"
    sim.script(
        [
            {"reply": {"tool_calls": [call("terminal", command=command)]}},
            {"reply": {"text": "never asked"}},
        ]
    )
    with pytest.raises(BadRequestError) as caught:
        _client(server).chat.completions.create(
            model="courier", messages=[{"role": "user", "content": "run it"}]
        )
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "secret_in_request"
    assert len(sim.requests()) == 1  # the call after the tool was held back
    assert_no_secret_sent(sim, server)
