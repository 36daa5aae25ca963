"""Count the database work a turn costs: commits and SQL statements, via engine events.

The counts feed Prometheus (`courier_db_commits_total`, `courier_db_statements_total`) so a
test or a benchmark can read what one request cost over HTTP, and a regression that adds a
commit to the turn path shows up as a number instead of as a slower machine. Commits made
on the event-loop thread are counted apart (`courier_db_loop_commits_total`): each one
stalled every open stream for as long as it took.
"""

from __future__ import annotations

from asyncio import events
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, event

from app.db.raw import count_statements


def count_db_work(
    engine: Engine,
    *,
    on_commit: Callable[[], None],
    on_statement: Callable[[], None],
    on_loop_commit: Callable[[], None] = lambda: None,
) -> None:
    """Call `on_commit` per committed transaction and `on_statement` per cursor execute.

    `executemany` counts once: it is one statement compiled once, which is the point.
    """

    def _commit(_conn: Any) -> None:
        on_commit()
        if events._get_running_loop() is not None:
            on_loop_commit()

    def _statement(*_args: Any) -> None:
        on_statement()

    event.listen(engine, "commit", _commit)
    event.listen(engine, "before_cursor_execute", _statement)
    count_statements(engine, on_statement)  # the hot statements skip the engine's events
