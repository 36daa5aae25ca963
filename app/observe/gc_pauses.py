"""How long the garbage collector held the interpreter, by generation.

A collection holds the interpreter lock whichever thread triggered it, so every stream
stalls for its length: under 100 concurrent streams a generation-1 pass took up to
about 20 ms and the one full pass of a 10-second load 35-60 ms (the startup objects are
frozen, see app/ops/drain.py; what is left is the turns' own). Exposed as
`courier_gc_pause_seconds{generation}`, so a latency tail can be told apart from a slow
write or a slow upstream by a number rather than by guesswork.

Process-wide, like the collector itself: installed once however many apps are built.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_GENERATIONS = (0, 1, 2)

# No lock: the callback runs inside a collection, and a collection can start inside any
# allocation, including one made while a lock taken here is held (a self-deadlock).
# Plain list updates under the interpreter lock are enough for counters read by a scrape.
_counts = [[0] * (len(BUCKETS) + 1) for _ in _GENERATIONS]
_sums = [0.0 for _ in _GENERATIONS]
_max = [0.0 for _ in _GENERATIONS]
_started = [0.0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    took = time.perf_counter() - _started[0]
    generation = int(info.get("generation", 2))
    _counts[generation][bisect.bisect_left(BUCKETS, took)] += 1
    _sums[generation] += took
    if took > _max[generation]:
        _max[generation] = took


def install() -> None:
    """Start timing collections; idempotent."""
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def pauses(generation: int) -> tuple[int, float, float]:
    """(collections, total seconds, longest seconds) of `generation` so far."""
    return sum(_counts[generation]), _sums[generation], _max[generation]


class GcPauseCollector(Collector):
    """`courier_gc_pause_seconds{generation}` (histogram) and the longest pause so far."""

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily]:
        histogram = HistogramMetricFamily(
            "courier_gc_pause_seconds",
            "Garbage-collector passes by generation: every stream stalls for their length",
            labels=["generation"],
        )
        longest = GaugeMetricFamily(
            "courier_gc_pause_max_seconds",
            "The longest garbage-collector pass since start, by generation",
            labels=["generation"],
        )
        for generation in _GENERATIONS:
            counts = list(_counts[generation])
            cumulative, buckets = 0, []
            for bound, count in zip((*BUCKETS, float("inf")), counts, strict=True):
                cumulative += count
                bound_label = "+Inf" if bound == float("inf") else repr(bound)
                buckets.append((bound_label, float(cumulative)))
            histogram.add_metric([str(generation)], buckets, _sums[generation])
            longest.add_metric([str(generation)], _max[generation])
        yield histogram
        yield longest
