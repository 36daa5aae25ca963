"""The store's search section: the full-text index kept current, and searches in it.

New messages reach the index in batches (app/db/search_index.py), so a turn's commits do
not pay for it; a search first catches the index up, so it never misses a message.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import text
from sqlmodel import col, select

from app.db import search_index, search_postgres
from app.db.models import MessageRow
from app.db.store.errors import STORE_FAILURES
from app.db.store.records import StoredMessage, stored
from app.db.store.transactions import Transactions, on_event_loop

log = logging.getLogger(__name__)


class SearchIndex(Transactions):
    """The full-text index kept current, and searches in it."""

    def index_for_search(self) -> int:
        """Index the messages committed since the last catch-up (app/db/search_index.py),
        in the current unit or one of its own; returns how many."""
        self._unit.indexing = True
        try:
            self.search_stale = False  # a commit from here on marks it again
            with self.unit():
                return search_index.index_pending(self._unit.conn)
        finally:
            self._unit.indexing = False

    def searchable(self) -> None:
        """Every committed message can be found: the pending ones are indexed first, on
        the writer thread (the caller waits for it, so never call this on the event loop:
        `await off_loop(index_for_search)` there)."""
        if getattr(self._unit, "writer", False) or getattr(self._unit, "conn", None) is not None:
            self.index_for_search()
            return
        if on_event_loop():
            raise RuntimeError("searchable() waits on the writer thread: not on the event loop")
        self._writer.submit(self.index_for_search).result()

    async def keep_search_index(self, interval_s: float) -> None:
        """Index new messages about every `interval_s`, in one batch, while anything commits
        (runs until cancelled)."""
        while True:
            await asyncio.sleep(interval_s)
            if not self.search_stale:
                continue
            try:
                await self.off_loop(self.index_for_search)
            except STORE_FAILURES:
                log.warning("could not update the search index; retrying", exc_info=True)

    def search_messages(
        self, *, session_id: str, query: str, limit: int = 20
    ) -> list[StoredMessage]:
        """Full-text search over live and compacted (not retracted) messages of a session."""
        self.flush()
        self.searchable()
        with self._session() as db:
            conn = db.connection()
            if conn.dialect.name == "postgresql":
                wanted = search_postgres.session_matches(
                    conn, session_id=session_id, query=query, limit=limit
                )
            else:
                found = conn.execute(
                    text(
                        "SELECT m.id FROM message_fts f JOIN message m ON m.id = f.rowid "
                        "WHERE message_fts MATCH :q AND m.session_id = :sid "
                        "AND (m.active = TRUE OR m.compacted = TRUE) ORDER BY m.id LIMIT :limit"
                    ),
                    {"q": query, "sid": session_id, "limit": limit},
                )
                wanted = [int(i) for i in found.scalars()]
            if not wanted:
                return []
            rows = db.exec(
                select(MessageRow)
                .where(col(MessageRow.id).in_(wanted))
                .order_by(col(MessageRow.id))
            ).all()
            return [stored(r) for r in rows]
