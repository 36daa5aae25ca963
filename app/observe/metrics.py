"""Prometheus metrics. Labels are bounded (profile, upstream model, outcome, bucket, exit
reason): a session or user id as a label would grow the series without limit."""

from __future__ import annotations

from decimal import Decimal
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from app.observe.gc_pauses import GcPauseCollector
from app.observe.gc_pauses import install as time_gc_pauses
from app.observe.loop_passes import LongPassCollector


class CallUsage(Protocol):
    """One call's tokens by bucket, as `app/providers/usage.py`'s `Usage` holds them. Named
    by shape: the providers count their long passes in this package (`loop_passes.py`),
    so it cannot import them back."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_read_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...
    @property
    def reasoning_tokens(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...


class CallCost(Protocol):
    """One call's price, as `app/providers/pricing.py`'s `Cost` holds it (named by shape
    likewise)."""

    @property
    def amount(self) -> Decimal | None: ...
    @property
    def status(self) -> str: ...


_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


_BUCKETS = ("input", "output", "cache_read", "cache_write", "reasoning")


class _ModelSeries:
    """One (profile, model)'s children, resolved once: `labels()` per call took a lock and
    a tuple lookup for each of ten series on every upstream call."""

    def __init__(self, metrics: Metrics, labels: tuple[str, str]) -> None:
        self.tokens = [metrics.tokens.labels(*labels, bucket) for bucket in _BUCKETS]
        self.cost = metrics.cost.labels(*labels)
        self.unpriced = metrics.unpriced.labels(*labels)
        self.calls: dict[str, Counter] = {}
        self.latency = metrics.latency.labels(*labels)
        self.ttft = metrics.ttft.labels(*labels)
        self.cache_share = metrics.cache_share.labels(*labels)


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
        self.tool_slots_busy = Gauge(
            "courier_tool_slots_busy", "Process-spawning tool calls running now", registry=r
        )
        self.tool_queue_seconds = Histogram(
            "courier_tool_queue_seconds",
            "Time a process-spawning tool call waited for a slot",
            buckets=(0.001, 0.01, 0.1, *_LATENCY_BUCKETS[2:]),
            registry=r,
        )
        self.db_commits = Counter("courier_db_commits", "Committed transactions", registry=r)
        self.db_statements = Counter("courier_db_statements", "SQL statements executed", registry=r)
        self.db_loop_commits = Counter(
            "courier_db_loop_commits", "Transactions committed on the event-loop thread", registry=r
        )
        # Process-wide counts (the store, agent and providers note them): one view per app.
        r.register(LongPassCollector())
        time_gc_pauses()
        r.register(GcPauseCollector())
        self._prompt: dict[tuple[str, str], tuple[int, int]] = {}
        self._series: dict[tuple[str, str], _ModelSeries] = {}

    def observe_call(
        self,
        *,
        profile: str,
        upstream_model: str,
        usage: CallUsage,
        cost: CallCost,
        latency_s: float,
        ttft_s: float | None,
        outcome: str,
    ) -> None:
        labels = (profile, upstream_model)
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = _ModelSeries(self, labels)
        for child, value in zip(
            series.tokens,
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.cache_write_tokens,
                usage.reasoning_tokens,
            ),
            strict=True,
        ):
            child.inc(value)
        if cost.amount is not None:
            series.cost.inc(float(cost.amount))
        elif cost.status == "unknown":
            series.unpriced.inc()
        calls = series.calls.get(outcome)
        if calls is None:
            calls = series.calls[outcome] = self.calls.labels(*labels, outcome)
        calls.inc()
        series.latency.observe(latency_s)
        if ttft_s is not None:
            series.ttft.observe(ttft_s)
        read, prompt = self._prompt.get(labels, (0, 0))
        read, prompt = read + usage.cache_read_tokens, prompt + usage.prompt_tokens
        self._prompt[labels] = (read, prompt)
        if prompt:
            series.cache_share.set(read / prompt)

    def render(self) -> bytes:
        return generate_latest(self.registry)
