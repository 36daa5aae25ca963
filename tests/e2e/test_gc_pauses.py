"""A real server's own startup collection is on /metrics: the callback is in place from the
first app built."""

from __future__ import annotations

import re

import httpx

from tests.support.server import ServerFactory

METRICS_KEY = "metrics-key-0123456789abcdef"


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("courier_gc_pause"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_the_server_reports_its_collections(servers: ServerFactory) -> None:
    """The server's own startup collection (before it freezes what startup made) is on
    /metrics already: the callback is in place from the first app built."""
    server = servers(COURIER_METRICS_API_KEY=METRICS_KEY)
    body = httpx.get(
        f"{server.base_url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_KEY}"},
        timeout=10,
    ).text
    server.stop()
    samples = _samples(body)
    assert samples['courier_gc_pause_seconds_count{generation="2"}'] >= 1
    assert re.search(r'^courier_gc_pause_seconds_sum\{generation="0"\} ', body, re.M)
