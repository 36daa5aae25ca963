"""Prometheus metrics. Labels are bounded (profile, upstream model, outcome, bucket, exit
reason): a session or user id as a label would grow the series without limit."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.providers.pricing import Cost
from app.providers.usage import Usage

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        # One registry per app, so tests can build several apps in one process.
        self.registry = CollectorRegistry()
        r = self.registry
        model = ["profile", "upstream_model"]
        self.tokens = Counter("courier_tokens", "Tokens by bucket", [*model, "bucket"], registry=r)
        self.cost = Counter("courier_cost_usd", "Known cost in USD", model, registry=r)
        self.unpriced = Counter(
            "courier_unpriced_calls", "Upstream calls whose cost is unknown", model, registry=r
        )
        self.calls = Counter(
            "courier_upstream_calls", "Upstream calls by outcome", [*model, "outcome"], registry=r
        )
        self.latency = Histogram(
            "courier_upstream_latency_seconds",
            "Upstream call duration",
            model,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "courier_upstream_ttft_seconds",
            "Upstream time to first event",
            model,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_share = Gauge(
            "courier_cache_read_share",
            "Cache-read tokens as a share of all prompt tokens since start",
            model,
            registry=r,
        )
        self.turns = Counter(
            "courier_turns", "Turns by exit reason", ["profile", "exit_reason"], registry=r
        )
        self.in_flight = Gauge("courier_turns_in_flight", "Turns running now", registry=r)
        self.db_commits = Counter("courier_db_commits", "Committed transactions", registry=r)
        self.db_statements = Counter("courier_db_statements", "SQL statements executed", registry=r)
        self._prompt: dict[tuple[str, str], tuple[int, int]] = {}

    def observe_call(
        self,
        *,
        profile: str,
        upstream_model: str,
        usage: Usage,
        cost: Cost,
        latency_s: float,
        ttft_s: float | None,
        outcome: str,
    ) -> None:
        labels = (profile, upstream_model)
        for bucket, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            self.tokens.labels(*labels, bucket).inc(value)
        if cost.amount is not None:
            self.cost.labels(*labels).inc(float(cost.amount))
        elif cost.status == "unknown":
            self.unpriced.labels(*labels).inc()
        self.calls.labels(*labels, outcome).inc()
        self.latency.labels(*labels).observe(latency_s)
        if ttft_s is not None:
            self.ttft.labels(*labels).observe(ttft_s)
        read, prompt = self._prompt.get(labels, (0, 0))
        read, prompt = read + usage.cache_read_tokens, prompt + usage.prompt_tokens
        self._prompt[labels] = (read, prompt)
        if prompt:
            self.cache_share.labels(*labels).set(read / prompt)

    def render(self) -> bytes:
        return generate_latest(self.registry)
