"""The store's usage ledger: one row per upstream call and the session's roll-up of them,
and what an owner or end user has spent."""

from __future__ import annotations

import time
from decimal import Decimal

from sqlalchemy import Connection
from sqlmodel import col, func, select

from app.db.models import ApiCallRow, SessionRow
from app.db.store.records import ApiCallRecord
from app.db.store.transactions import Transactions
from app.db.turn_sql import INSERT_API_CALL, ROLLUP, ROLLUP_READ


class UsageLedger(Transactions):
    """One row per upstream call with the session's roll-up, and spend by owner."""

    def record_api_call(
        self,
        *,
        session_id: str,
        owner: str,
        turn_id: str,
        call: ApiCallRecord,
        end_user: str = "",
    ) -> None:
        """One row per upstream call, and the session's roll-up, in one transaction."""
        row = {
            "session_id": session_id,
            "turn_id": turn_id,
            "owner": owner,
            "end_user": end_user,
            "profile": call.profile,
            "upstream_model": call.upstream_model,
            "input_tokens": call.input_tokens,
            "output_tokens": call.output_tokens,
            "cache_read_tokens": call.cache_read_tokens,
            "cache_write_tokens": call.cache_write_tokens,
            "reasoning_tokens": call.reasoning_tokens,
            "cost_usd": str(call.cost_usd) if call.cost_usd is not None else None,
            "cost_status": call.cost_status,
            "cost_source": call.cost_source,
            "latency_ms": call.latency_ms,
            "ttft_ms": call.ttft_ms,
            "outcome": call.outcome,
            "cache_break": call.cache_break,
            "created_at": time.time(),
        }

        unknown = call.cost_usd is None and call.cost_status == "unknown"

        def roll_up(session: SessionRow) -> None:
            values = vars(session)  # a detached row (see `_issue`)
            if call.cache_break is not None and values["pending_cache_break"] == call.cache_break:
                values["pending_cache_break"] = None
            values["input_tokens"] += call.input_tokens
            values["output_tokens"] += call.output_tokens
            values["cache_read_tokens"] += call.cache_read_tokens
            values["cache_write_tokens"] += call.cache_write_tokens
            values["reasoning_tokens"] += call.reasoning_tokens
            values["upstream_calls"] += 1
            values["cost_unknown_calls"] += int(unknown)
            if call.cost_usd is not None:
                values["cost_usd"] = str(Decimal(values["cost_usd"]) + call.cost_usd)

        rolled = {
            "input": call.input_tokens,
            "output": call.output_tokens,
            "cache_read": call.cache_read_tokens,
            "cache_write": call.cache_write_tokens,
            "reasoning": call.reasoning_tokens,
            "unknown": int(unknown),
            "brk": call.cache_break,
            "sid": session_id,
        }

        def rolled_up(conn: Connection, old: str) -> bool:
            # Decimal in Python: SQLite would add the stored text as a lossy float.
            cost = old if call.cost_usd is None else str(Decimal(old) + call.cost_usd)
            return bool(ROLLUP.run(conn, rolled | {"cost": cost, "old": old}).rowcount == 1)

        # The cost the session will hold when this write runs: the lease holder's kept row
        # has every earlier write of the turn applied, so no read is needed.
        expected = self._rows.cost(session_id)

        def write(conn: Connection) -> None:
            INSERT_API_CALL.run(conn, row)
            if expected is not None and rolled_up(conn, expected):
                return
            found = ROLLUP_READ.run(conn, {"sid": session_id}).fetchone()
            if found is not None:
                rolled_up(conn, found[0])

        # Deferred on the event loop: the call's record rides in the turn's next commit
        # (the reply's, or the closing one), and reads of the session see it meanwhile.
        self._issue(session_id, write, roll_up)

    def api_calls(
        self, *, session_id: str, limit: int = 100, offset: int = 0
    ) -> tuple[list[ApiCallRow], int]:
        self.flush()
        with self._session(expire_on_commit=False) as db:
            rows = db.exec(
                select(ApiCallRow)
                .where(ApiCallRow.session_id == session_id)
                .order_by(col(ApiCallRow.id))
                .offset(offset)
                .limit(limit)
            ).all()
            total = db.exec(
                select(func.count())
                .select_from(ApiCallRow)
                .where(ApiCallRow.session_id == session_id)
            ).one()
            return list(rows), int(total)

    def spent_by_owner(
        self, *, owner: str, since: float | None = None, end_user: str | None = None
    ) -> tuple[Decimal, int]:
        """Known spend and the number of unpriced calls for one API key (or one end user of
        it), optionally windowed."""
        self.flush()
        with self._session() as db:
            query = select(ApiCallRow.cost_usd).where(ApiCallRow.owner == owner)
            if end_user is not None:
                query = query.where(ApiCallRow.end_user == end_user)
            if since is not None:
                query = query.where(col(ApiCallRow.created_at) >= since)
            total = Decimal(0)
            unknown = 0
            for cost in db.exec(query).all():
                if cost is None:
                    unknown += 1
                else:
                    total += Decimal(cost)
            return total, unknown
