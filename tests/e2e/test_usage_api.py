"""Usage and cost over HTTP: sums, stream/JSON parity, the ledger, spend caps, metrics."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import Server, ServerFactory, free_port
from tests.support.sim import Simulator
from tests.support.spec import validate

BODY: dict[str, Any] = {"model": "courier", "messages": [{"role": "user", "content": "go"}]}
TWO_CALLS = [
    {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
    {"reply": {"text": "Nothing to see."}},
]


def _post(server: Server, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**headers),
        timeout=30,
    )


def _stream(server: Server, body: dict[str, Any], **headers: str) -> tuple[str, list[Any]]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        headers=server.headers(**headers),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        sid = resp.headers["x-session-id"]
        data = [ln[6:] for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return sid, [json.loads(d) for d in data[:-1]]


def _ledger(server: Server, sid: str, **params: Any) -> dict[str, Any]:
    resp = httpx.get(
        f"{server.base_url}/v1/sessions/{sid}/usage", params=params, headers=server.headers()
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def test_turn_usage_is_the_sum_of_its_calls(server: Server, sim: Simulator) -> None:
    sim.script(TWO_CALLS)
    resp = _post(server, BODY)
    usage = resp.json()["usage"]
    courier = usage["courier"]
    ledger = _ledger(server, resp.headers["x-session-id"])
    calls = ledger["calls"]
    assert len(calls) == 2 == courier["upstream_calls"]
    assert resp.headers["x-courier-upstream-calls"] == "2"
    for bucket in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert courier[bucket] == sum(c[bucket] for c in calls)
    assert usage["prompt_tokens"] == (
        courier["input_tokens"] + courier["cache_read_tokens"] + courier["cache_write_tokens"]
    )
    assert usage["completion_tokens"] == courier["output_tokens"]
    # gpt-4o-mini is priced by genai-prices: the cost is a defensible estimate.
    assert courier["cost"]["status"] == "estimated"
    assert courier["cost"]["source"].startswith("genai-prices ")
    total = sum(Decimal(c["cost_usd"]) for c in calls)
    assert Decimal(courier["cost"]["amount_usd"]) == total
    assert resp.headers["x-courier-cost-usd"] == courier["cost"]["amount_usd"]
    assert usage["cost"] == pytest.approx(float(total))
    assert ledger["totals"]["cost_usd"] == str(total)
    validate("CompletionUsage", usage)


def test_streamed_and_json_usage_are_identical(server: Server, sim: Simulator) -> None:
    sim.script(TWO_CALLS)
    json_usage = _post(server, BODY).json()["usage"]
    sim.script(TWO_CALLS)
    _, chunks = _stream(server, BODY)
    assert chunks[-1]["usage"] == json_usage


def test_ledger_is_paged_and_private(server: Server, sim: Simulator) -> None:
    sim.script(TWO_CALLS)
    sid = _post(server, BODY).headers["x-session-id"]
    page = _ledger(server, sid, limit=1, offset=1)
    assert page["total_calls"] == 2 and len(page["calls"]) == 1 and not page["has_more"]
    assert page["calls"][0]["outcome"] == "ok"
    other = httpx.get(
        f"{server.base_url}/v1/sessions/{sid}/usage",
        headers={"Authorization": "Bearer someone-else-entirely-123"},
    )
    assert other.status_code == 401


def test_metrics_need_the_metrics_scope(server: Server) -> None:
    resp = httpx.get(f"{server.base_url}/metrics", headers=server.headers())
    assert resp.status_code == 403
    assert resp.json()["error"]["code"] == "insufficient_scope"


# ---------------------------------------------------------------- anthropic wire: cache


@pytest.fixture(scope="module")
def claude(module_servers: ServerFactory) -> Server:
    return module_servers("anthropic")


def test_cache_buckets_on_the_anthropic_wire(claude: Server, sim: Simulator) -> None:
    sim.configure(min_cacheable_tokens=64)
    try:
        sim.script(TWO_CALLS)
        resp = _post(claude, BODY)
    finally:
        sim.configure(min_cacheable_tokens=1024)
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    courier = usage["courier"]
    calls = _ledger(claude, resp.headers["x-session-id"])["calls"]
    # Call 1 writes the system prompt to the cache; call 2 reads it back.
    assert calls[0]["cache_write_tokens"] > 0 and calls[0]["cache_read_tokens"] == 0
    assert calls[1]["cache_read_tokens"] >= calls[0]["cache_write_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == courier["cache_read_tokens"]
    assert usage["prompt_tokens_details"]["cache_write_tokens"] == courier["cache_write_tokens"]
    assert usage["prompt_tokens"] == sum(
        c["input_tokens"] + c["cache_read_tokens"] + c["cache_write_tokens"] for c in calls
    )
    assert courier["cost"]["status"] == "estimated"


# ---------------------------------------------------------------- spend caps


def test_request_cap_stops_the_run_between_calls(server: Server, sim: Simulator) -> None:
    sim.script(TWO_CALLS[:1])
    resp = _post(server, {**BODY, "max_cost_usd": 1e-9})
    assert resp.status_code == 402
    error = resp.json()["error"]
    assert error["code"] == "spend_limit_reached" and "request" in error["message"]
    sim.assert_script_done()  # exactly one upstream call ran
    sid = resp.headers["x-session-id"]
    # The transcript stays valid: the tool call has its result, and the session continues
    # once the cap is raised.
    sim.script([{"expect": {"last_user_contains": "again"}, "reply": {"text": "resumed"}}])
    again = _post(
        server,
        {"model": "courier", "messages": [{"role": "user", "content": "again"}], "max_cost_usd": 1},
        **{"X-Session-Id": sid},
    )
    assert again.status_code == 200, again.text
    upstream = json.loads(sim.requests()[-1]["body"])["messages"]
    assert [m["role"] for m in upstream[1:]] == ["user", "assistant", "tool", "user"]


def test_request_cap_in_stream_ends_with_error_and_done(server: Server, sim: Simulator) -> None:
    sim.script(TWO_CALLS[:1])
    _, chunks = _stream(server, {**BODY, "max_cost_usd": 1e-9})
    assert chunks[-1]["error"]["code"] == "spend_limit_reached"


@pytest.mark.parametrize(
    "cap",
    [
        "COURIER_SPEND_CAP_SESSION_USD",
        "COURIER_SPEND_CAP_KEY_USD",
        "COURIER_SPEND_CAP_KEY_DAILY_USD",
    ],
)
def test_configured_caps_stop_and_resume(sim: Simulator, servers: ServerFactory, cap: str) -> None:
    server = servers(**{cap: "0.0000001"})
    sim.script(TWO_CALLS[:1])
    first = _post(server, BODY)
    assert first.status_code == 402, first.text
    sid = first.headers["x-session-id"]
    # Already over the cap: refused up front, before any write or upstream call.
    before = len(sim.requests())
    refused = _post(server, BODY, **{"X-Session-Id": sid})
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "spend_limit_reached"
    assert len(sim.requests()) == before
    server.stop()
    server = servers(data_dir=server.data_dir, **{cap: "100"})
    sim.script([{"reply": {"text": "back in business"}}])
    resumed = _post(
        server,
        {**BODY, "messages": [{"role": "user", "content": "more"}]},
        **{"X-Session-Id": sid},
    )
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["choices"][0]["message"]["content"] == "back in business"


def test_cap_with_unknown_price_is_refused_up_front(sim: Simulator, servers: ServerFactory) -> None:
    server = servers(COURIER_UPSTREAM_MODEL="made-up-model-9000")
    resp = _post(server, {**BODY, "max_cost_usd": 5})
    assert resp.status_code == 402
    assert resp.json()["error"]["code"] == "spend_limit_unpriced"
    assert not sim.requests()
    sim.script([{"reply": {"text": "unpriced but uncapped"}}])
    ok = _post(server, BODY)
    assert ok.status_code == 200
    assert ok.json()["usage"]["cost"] is None
    assert ok.json()["usage"]["courier"]["cost"]["status"] == "unknown"
    assert ok.headers["x-courier-cost-usd"] == "unknown"


# ---------------------------------------------------------------- metrics


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text, 0 when the series does not exist yet."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def test_metrics_move_after_a_turn(sim: Simulator, servers: ServerFactory) -> None:
    metrics_key = "metrics-reader-key-0123456789"
    server = servers(COURIER_METRICS_API_KEY=metrics_key)
    auth = {"Authorization": f"Bearer {metrics_key}"}

    def scrape() -> str:
        resp = httpx.get(f"{server.base_url}/metrics", headers=auth)
        assert resp.status_code == 200
        return resp.text

    before = _sample(scrape(), "courier_upstream_calls_total", outcome="ok")
    sim.script(TWO_CALLS)
    assert _post(server, BODY).status_code == 200
    text = scrape()
    model = {"profile": "courier", "upstream_model": "gpt-4o-mini"}
    assert _sample(text, "courier_upstream_calls_total", outcome="ok", **model) == before + 2
    assert _sample(text, "courier_tokens_total", bucket="input", **model) > 0
    assert _sample(text, "courier_tokens_total", bucket="output", **model) > 0
    assert _sample(text, "courier_cost_usd_total", **model) > 0
    assert _sample(text, "courier_turns_total", profile="courier", exit_reason="completed") == 1
    assert _sample(text, "courier_upstream_latency_seconds_count", **model) == 2
    assert _sample(text, "courier_upstream_ttft_seconds_count", **model) == 2
    assert _sample(text, "courier_turns_in_flight") == 0
    assert "courier_cache_read_share" in text
    assert "sess_" not in text  # no unbounded labels
    # The metrics key cannot chat.
    denied = httpx.post(
        f"{server.base_url}/v1/chat/completions", json=BODY, headers=auth, timeout=30
    )
    assert denied.status_code == 403


def test_metrics_on_a_separate_loopback_port(servers: ServerFactory) -> None:
    port = free_port()
    servers(COURIER_METRICS_PORT=str(port))  # what it serves there is all this test reads
    resp = httpx.get(f"http://127.0.0.1:{port}/metrics")
    assert resp.status_code == 200
    assert "courier_turns_in_flight" in resp.text
