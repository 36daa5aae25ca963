"""A long session's first upstream call, with its passes over every row off the event loop.

Later calls of a leased session resume from what the first one kept (the store's live log,
the compressor's running size, the kept projection, the encoded body), so they cost a few
rows each. The first call of a 10,000-message session has none of that: reading and
decoding the rows, sizing them and projecting them are each a pass over all of them, and on
the event loop every other stream fell silent for as long as they took (250-300 ms in
`benchmarks/loop_stall.py`). Here each pass that covers more than `LONG_PASS` rows runs on
a worker thread and what it builds is kept under the owner's lock, so the loop's next use
finds it and does no more than a short session would; a short pass runs where it is, as it
costs less than the hop. (The provider encodes a long body off the loop the same way.)

Only the session's lease holder appends to or projects a session, and it waits for these
passes, so nothing of the session changes under them. `app/observe/loop_passes.py` counts where
every long pass ran.
"""

from __future__ import annotations

from app.agent.context.compressor import Compressor
from app.agent.context.live_projection import projections_for
from app.db.models import SessionRow
from app.db.store import Store, StoredMessage
from app.observe.loop_passes import is_long, off_loop, on_worker


async def live_rows(store: Store, session_id: str) -> list[StoredMessage]:
    """`store.active_messages`, with a log the store does not keep read on a worker thread.

    Not kept means read whatever its length, as no length is known before the read. A new
    session's log is kept from its creation, so this is only after a rewrite (a compaction
    or prune, which only long logs get), a restart or an eviction: rare, and the hop also
    spares the loop the read's wait on SQLite.
    """
    if not store.keeps_live(session_id):
        store.flush()  # the loop's deferred writes land first, as `active_messages` does
        await on_worker(lambda: store.load_live(session_id=session_id))
    return store.active_messages(session_id=session_id)


async def sized(comp: Compressor, session: SessionRow, rows: list[StoredMessage]) -> int:
    """`comp.estimate(session, rows)`, on a worker thread when many rows are unsized."""
    return await off_loop(comp.unsized(session.id, rows), lambda: comp.estimate(session, rows))


async def project_ahead(store: Store, session_id: str, rows: list[StoredMessage]) -> None:
    """Fold the rows the kept projection lacks, on a worker thread when they are many; the
    call's `project` then only reads what was kept."""
    projections = projections_for(store)
    if is_long(projections.unfolded(session_id, rows)):
        await off_loop(len(rows), lambda: projections.prepare(session_id, rows))
