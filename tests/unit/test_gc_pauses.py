"""Garbage-collector pauses, timed by generation and exposed as a histogram."""

from __future__ import annotations

import gc

from prometheus_client import CollectorRegistry, generate_latest

from app.observe import gc_pauses


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("courier_gc_pause"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_a_full_collection_is_timed_and_exposed_as_a_histogram() -> None:
    gc_pauses.install()
    gc_pauses.install()  # idempotent: one callback, not one per app built
    assert gc.callbacks.count(gc_pauses._on_gc) == 1
    before, total_before, _ = gc_pauses.pauses(2)
    gc.collect()
    count, total, longest = gc_pauses.pauses(2)
    assert count >= before + 1  # another thread may collect too
    assert total > total_before and longest > 0
    registry = CollectorRegistry()
    registry.register(gc_pauses.GcPauseCollector())
    samples = _samples(generate_latest(registry).decode())
    assert samples['courier_gc_pause_seconds_count{generation="2"}'] == count
    assert samples['courier_gc_pause_seconds_bucket{generation="2",le="+Inf"}'] == count
    bounds = [
        samples[f'courier_gc_pause_seconds_bucket{{generation="2",le="{b!r}"}}']
        for b in gc_pauses.BUCKETS
    ]
    assert bounds == sorted(bounds) and bounds[-1] <= count
    assert samples['courier_gc_pause_max_seconds{generation="2"}'] == longest
