"""One upstream call's ledger record, for the store's tests."""

from __future__ import annotations

from decimal import Decimal

from app.db.store import ApiCallRecord


def api_call(
    cost: Decimal | str | None, status: str | None = None, *, cache_break: str | None = None
) -> ApiCallRecord:
    """10 fresh input, 5 output, 100 cache-read, 1 cache-write and 2 reasoning tokens at
    `cost` (None: unpriced, `unknown` unless `status` says otherwise)."""
    return ApiCallRecord(
        profile="courier",
        upstream_model="m",
        input_tokens=10,
        output_tokens=5,
        cache_read_tokens=100,
        cache_write_tokens=1,
        reasoning_tokens=2,
        cost_usd=Decimal(cost) if cost is not None else None,
        cost_status=status or ("estimated" if cost is not None else "unknown"),
        cost_source="test",
        latency_ms=1.0,
        ttft_ms=0.5,
        outcome="ok",
        cache_break=cache_break,
    )
