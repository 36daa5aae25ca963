"""Read-only queries for operators (`courier sessions`, `courier usage`), straight on the file.

Separate from `Store`: these run from a CLI process beside a live server, write nothing but
the search index's catch-up, and show every row (archived and retracted too), where the
agent's own reads show the live log. SQLite in WAL mode lets them read while the server
writes.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from app.db import search_index


class StoreMissing(Exception):
    """There is no database at the path: wrong COURIER_DATA_DIR, or nothing has run yet."""


class UnknownSession(Exception):
    """The session named is not in the store (or not among the listing's)."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    id: str
    owner: str
    profile: str
    title: str
    started_at: float
    last_active_at: float
    turns: int
    messages: int
    cost_usd: Decimal
    cost_unknown_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@dataclass(frozen=True, slots=True)
class UsageRow:
    day: str
    owner: str
    profile: str
    calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: Decimal
    unknown_calls: int


def state_of(active: int, compacted: int) -> str:
    """The row's place in the log: live, summarised away (archived) or retracted."""
    if active:
        return "live"
    return "archived" if compacted else "retracted"


class OperatorStore:
    def __init__(self, db_path: Path) -> None:
        if not db_path.is_file():
            raise StoreMissing(f"no database at {db_path} (is COURIER_DATA_DIR right?)")
        # Read-only URI: a typo'd path must not create an empty database, and nothing here
        # can take a write lock the live server would then wait on (but `_index_pending`).
        self._path = db_path
        self._db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        self._db.close()

    def _rows(self, sql: str, params: dict[str, Any]) -> list[sqlite3.Row]:
        return list(self._db.execute(sql, params).fetchall())

    _SUMMARY = """
        SELECT s.id, s.owner, s.profile, s.started_at, s.updated_at, s.cost_usd,
               s.cost_unknown_calls, s.input_tokens, s.output_tokens, s.cache_read_tokens,
               s.cache_write_tokens,
               (SELECT COUNT(*) FROM turn t WHERE t.session_id = s.id) AS turns,
               (SELECT COUNT(*) FROM message m WHERE m.session_id = s.id) AS messages,
               (SELECT substr(m.content, 1, 200) FROM message m
                 WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.id LIMIT 1) AS title
        FROM session s
    """

    def _summary(self, row: sqlite3.Row) -> SessionSummary:
        title = " ".join((row["title"] or "").split())[:80]
        return SessionSummary(
            id=row["id"],
            owner=row["owner"],
            profile=row["profile"],
            title=title,
            started_at=row["started_at"],
            last_active_at=row["updated_at"],
            turns=row["turns"],
            messages=row["messages"],
            cost_usd=Decimal(row["cost_usd"] or "0"),
            cost_unknown_calls=row["cost_unknown_calls"],
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cache_read_tokens=row["cache_read_tokens"],
            cache_write_tokens=row["cache_write_tokens"],
        )

    def sessions(
        self, *, limit: int = 50, owner: str | None = None, after: str | None = None
    ) -> list[SessionSummary]:
        """Newest started first, from after `after`, the previous page's last session
        (`UnknownSession` when it is not one of this listing's). One key's listing walks
        `ix_session_owner_started` from there; every key's together sorts all sessions, as
        rarely as an operator asks."""
        where = ["s.owner = :owner"] if owner else []
        params: dict[str, Any] = {"owner": owner, "limit": limit}
        if after is not None:
            anchor = self._rows(
                "SELECT started_at, id FROM session s WHERE s.id = :after"
                + "".join(f" AND {w}" for w in where),
                {"after": after, "owner": owner},
            )
            if not anchor:
                raise UnknownSession(after)
            where.append("(s.started_at, s.id) < (:started, :after)")
            params |= {"started": anchor[0]["started_at"], "after": anchor[0]["id"]}
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._rows(
            f"{self._SUMMARY} {clause} ORDER BY s.started_at DESC, s.id DESC LIMIT :limit",
            params,
        )
        return [self._summary(r) for r in rows]

    def session(self, session_id: str) -> SessionSummary | None:
        rows = self._rows(f"{self._SUMMARY} WHERE s.id = :sid", {"sid": session_id})
        return self._summary(rows[0]) if rows else None

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        """Every row of the session in log order, with its state."""
        rows = self._rows(
            "SELECT id, turn_id, role, content, api_content, tool_calls, tool_call_id, "
            "tool_name, is_error, kind, active, compacted, created_at FROM message "
            "WHERE session_id = :sid ORDER BY id",
            {"sid": session_id},
        )
        out = []
        for r in rows:
            item = {k: r[k] for k in r.keys() if k not in ("active", "compacted")}  # noqa: SIM118
            item["state"] = state_of(r["active"], r["compacted"])
            item["is_error"] = bool(r["is_error"])
            out.append(item)
        return out

    def _index_pending(self) -> None:
        """Index the newest messages first (app/db/search_index.py): the one write here, a
        transaction of a moment that the server's writes wait out like each other's. On a
        database this process may not write, the search finds what is indexed already."""
        # Refused when this process may not write (a read-only mount, another user's
        # file) or the server held the lock past the timeout: the search goes on.
        with (
            contextlib.suppress(sqlite3.OperationalError),
            contextlib.closing(
                sqlite3.connect(f"file:{self._path}?mode=rw", uri=True, timeout=5)
            ) as db,
            db,
        ):
            db.execute(search_index.INDEX_PENDING.sql)
            db.execute(search_index.CLEAR_PENDING.sql)

    def search(self, query: str, *, limit: int = 20) -> list[dict[str, Any]]:
        """Full-text matches across sessions (live and archived rows; retracted ones are not
        searchable, as in the agent's own search)."""
        self._index_pending()
        phrase = '"' + query.replace('"', '""') + '"'  # a phrase: user text is not FTS syntax
        rows = self._rows(
            "SELECT m.id, m.session_id, m.role, m.active, m.compacted, m.created_at, "
            "snippet(message_fts, 0, '[', ']', '…', 12) AS snippet "
            "FROM message_fts JOIN message m ON m.id = message_fts.rowid "
            "WHERE message_fts MATCH :q AND (m.active = 1 OR m.compacted = 1) "
            "ORDER BY m.id DESC LIMIT :limit",
            {"q": phrase, "limit": limit},
        )
        return [
            {
                "message_id": r["id"],
                "session_id": r["session_id"],
                "role": r["role"],
                "state": state_of(r["active"], r["compacted"]),
                "created_at": r["created_at"],
                "snippet": r["snippet"],
            }
            for r in rows
        ]

    def usage(
        self,
        *,
        since: float | None = None,
        owner: str | None = None,
        session_id: str | None = None,
    ) -> list[UsageRow]:
        """Spend per UTC day, key (owner) and profile, from the per-call ledger (of one
        session's calls, given `session_id`)."""
        where = (
            "WHERE (:since IS NULL OR created_at >= :since) AND (:owner IS NULL OR owner = :owner)"
            " AND (:session_id IS NULL OR session_id = :session_id)"
        )
        params = {"since": since, "owner": owner, "session_id": session_id}
        rows = self._rows(
            "SELECT date(created_at, 'unixepoch') AS day, owner, profile, COUNT(*) AS calls, "
            "SUM(input_tokens) AS i, SUM(output_tokens) AS o, SUM(cache_read_tokens) AS cr, "
            "SUM(cache_write_tokens) AS cw, "
            "SUM(CASE WHEN cost_status = 'unknown' THEN 1 ELSE 0 END) AS unknown "
            f"FROM api_call {where} GROUP BY day, owner, profile ORDER BY day, owner, profile",
            params,
        )
        # Costs are decimal strings: summed here in Decimal, since SQL's SUM would go
        # through binary floats and drift in the last cents.
        costs: dict[tuple[str, str, str], Decimal] = {}
        for r in self._rows(
            "SELECT date(created_at, 'unixepoch') AS day, owner, profile, cost_usd FROM api_call "
            f"{where} AND cost_usd IS NOT NULL",
            params,
        ):
            key = (r["day"], r["owner"], r["profile"])
            costs[key] = costs.get(key, Decimal(0)) + Decimal(r["cost_usd"])
        return [
            UsageRow(
                day=r["day"],
                owner=r["owner"],
                profile=r["profile"],
                calls=r["calls"],
                input_tokens=r["i"] or 0,
                output_tokens=r["o"] or 0,
                cache_read_tokens=r["cr"] or 0,
                cache_write_tokens=r["cw"] or 0,
                cost_usd=costs.get((r["day"], r["owner"], r["profile"]), Decimal(0)),
                unknown_calls=r["unknown"] or 0,
            )
            for r in rows
        ]
