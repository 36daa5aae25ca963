"""GET /v1/usage: spend per UTC day for the caller's key (every key's for an admin; a token
bound to one session: that session's).

The console's spend chart reads this; summing every session's ledger in the browser would
take one request per session.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.http.deps import PrincipalDep, StateDep
from app.db.operator_store import OperatorStore, StoreMissing, UsageRow

router = APIRouter()


def _daily(rows: list[UsageRow]) -> list[dict[str, Any]]:
    days: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = days.setdefault(
            r.day,
            {"day": r.day, "calls": 0, "unpriced_calls": 0, "input_tokens": 0,
             "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0,
             "cost_usd": Decimal(0)},
        )  # fmt: skip
        d["calls"] += r.calls
        d["unpriced_calls"] += r.unknown_calls
        d["input_tokens"] += r.input_tokens
        d["output_tokens"] += r.output_tokens
        d["cache_read_tokens"] += r.cache_read_tokens
        d["cache_write_tokens"] += r.cache_write_tokens
        d["cost_usd"] += r.cost_usd
    return [{**d, "cost_usd": str(d["cost_usd"])} for d in days.values()]


@router.get("/v1/usage")
async def usage(
    state: StateDep,
    principal: PrincipalDep,
    days: Annotated[int, Query(ge=1, le=366)] = 30,
) -> dict[str, Any]:
    since = time.time() - days * 86400

    def read() -> list[UsageRow]:
        try:
            store = OperatorStore(state.settings.db_path)
        except StoreMissing:
            return []
        try:
            return store.usage(
                since=since,
                owner=None if principal.admin else principal.owner,
                session_id=principal.session_id,
            )
        finally:
            store.close()

    rows = await asyncio.to_thread(read)
    return {"object": "list", "data": _daily(rows)}
