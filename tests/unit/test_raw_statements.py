"""The turn path's DBAPI statements (app/db/raw.py): the same SQL on every dialect we
plan for, parameters bound by name whatever the driver's style, and counted like Core's."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.dialects import postgresql, sqlite

import app.db.chat_store as chat_store
import app.db.tool_store as tool_store
import app.db.turn_sql as turn_sql
from app.db.raw import Hot
from app.db.stats import count_db_work
from app.db.store import NewMessage, Store

STATEMENTS = [
    (module.__name__, name, value)
    for module in (turn_sql, chat_store, tool_store)
    for name, value in vars(module).items()
    if isinstance(value, Hot)
]


def test_the_modules_hold_hot_statements() -> None:
    assert len(STATEMENTS) >= 15  # the turn's units, the index, the tools' own


@pytest.mark.parametrize(("module", "name", "statement"), STATEMENTS)
def test_each_compiles_for_sqlite_and_postgresql(module: str, name: str, statement: Hot) -> None:
    lite, order = statement._for(sqlite.dialect())
    assert order is not None and lite.count("?") == len(order)
    pg, named = statement._for(postgresql.dialect())
    assert named is None  # pyformat: the parameter dict goes as it is
    assert pg.count("%(") == len(order)
    assert ":" not in pg.replace("::", ""), pg  # no parameter left unbound


def test_a_positional_driver_gets_the_values_in_the_statement_order(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "x.db")
    counted: list[int] = []
    count_db_work(store.engine, on_commit=lambda: None, on_statement=lambda: counted.append(1))
    try:
        store.create_session(session_id="s", owner="o", profile="p", system_prompt="x", lease="l")
        before = len(counted)
        ids = store.append_messages(
            session_id="s",
            lease="l",
            turn_id=None,
            messages=[
                NewMessage(role="user", content="one"),
                NewMessage(role="user", content="two"),
            ],
        )
        # The fence and one insert per row, each counted though it skips Core's events.
        assert len(counted) - before == 3
        rows = store.active_messages(session_id="s")
        assert [(r.id, r.content) for r in rows] == list(zip(ids, ["one", "two"], strict=True))
        assert ids == sorted(ids) and len(set(ids)) == 2
    finally:
        store.close()
