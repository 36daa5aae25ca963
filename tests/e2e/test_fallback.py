"""The fallback chain, over HTTP against the simulator's faults: an outage retried then sent
to the next profile (another wire), a permanent error costing exactly one upstream attempt
(the hints it reads are checked in tests/unit/test_fallback.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def chained(
    module_servers: ServerFactory, simulator: Simulator, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    """The default profile (OpenAI wire) falls back to `backup` (Anthropic wire)."""
    config = tmp_path_factory.mktemp("fallback") / "courier.toml"
    config.write_text(
        "[[profiles]]\n"
        'name = "backup"\n'
        'provider = "anthropic"\n'
        f'base_url = "{simulator.base_url}"\n'
        'api_key = "sim-upstream-key"\n'
        'model = "claude-sonnet-4-5"\n'
        "retry_base_delay_s = 0.01\n"
    )
    return module_servers(COURIER_CONFIG=str(config), COURIER_FALLBACK="backup")


def _chat(server: Server, text: str) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    return httpx.post(f"{server.base_url}{URL}", json=body, headers=server.headers(), timeout=30)


def _ledger(server: Server, sid: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{server.base_url}/v1/sessions/{sid}/usage", headers=server.headers())
    assert resp.status_code == 200, resp.text
    calls: list[dict[str, Any]] = resp.json()["calls"]
    return calls


def _paths(sim: Simulator) -> list[str]:
    return [r["path"] for r in sim.requests()]


def test_outage_is_retried_then_falls_back(chained: Server, sim: Simulator) -> None:
    overloaded = {"fault": {"status": 529}}
    sim.script(
        [
            overloaded,
            overloaded,
            overloaded,
            {"expect": {"last_user_contains": "hello"}, "reply": {"text": "From the backup."}},
        ]
    )
    resp = _chat(chained, "hello")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["choices"][0]["message"]["content"] == "From the backup."
    assert body["usage"]["courier"]["routes"] == ["courier", "backup"]
    sim.assert_script_done()
    # Three attempts on the first route, then the same request on the other wire.
    assert _paths(sim) == ["/v1/chat/completions"] * 3 + ["/v1/messages"]
    ledger = _ledger(chained, resp.headers["x-session-id"])
    assert [(c["profile"], c["upstream_model"], c["outcome"]) for c in ledger] == [
        ("courier", "gpt-4o-mini", "overloaded"),
        ("backup", "claude-sonnet-4-5", "ok"),
    ]
    # The backup's request is planned for its own wire: cache markers on Anthropic blocks.
    sent = json.loads(sim.requests()[-1]["body"])
    assert "cache_control" in json.dumps(sent)


def test_unknown_model_falls_back(chained: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"fault": {"status": 404, "message": "The model `gpt-4o-mini` does not exist"}},
            {"reply": {"text": "Served."}},
        ]
    )
    resp = _chat(chained, "hi")
    assert resp.status_code == 200, resp.text
    assert _paths(sim) == ["/v1/chat/completions", "/v1/messages"]


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [
        ({"status": 400, "message": "Unknown parameter: 'foo'"}, 400, "upstream_bad_request"),
        (
            {"status": 400, "message": "Flagged by our content_policy"},
            400,
            "upstream_content_policy",
        ),
    ],
)
def test_permanent_error_costs_one_attempt(
    chained: Server, sim: Simulator, fault: dict[str, Any], status: int, code: str
) -> None:
    sim.script([{"fault": fault}])
    resp = _chat(chained, f"permanent {code}")  # distinct words: not a retry of a twin
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code
    assert resp.headers["x-should-retry"] == "false"
    assert len(sim.requests()) == 1  # no retry, no fallback


def test_both_routes_down_is_a_retryable_error(chained: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 503, "message": "upstream unavailable"}}] * 6)
    resp = _chat(chained, "anyone up?")
    assert resp.status_code == 502, resp.text
    assert resp.headers["x-should-retry"] == "true"
    assert _paths(sim) == ["/v1/chat/completions"] * 3 + ["/v1/messages"] * 3
