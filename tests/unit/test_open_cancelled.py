"""A request cancelled while its turn is opening on the store's writer thread.

The thread cannot be stopped mid-transaction, so it commits the lease and the turn row
anyway; the serving object must then start that turn already cancelled, so its close
records it and releases the lease. Otherwise the session would stay busy for good.
In-process, with a real SQLite store: the write lock is held from outside so the open is
still in flight when the request is cancelled.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from app.agent.turns.manager import TurnManager
from app.api.chat.serving import ChatServing
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.retries import Retry
from app.api.turn_serving import TurnServing
from app.config import Settings
from app.db.key_store import KeyStateStore
from app.db.store import Store
from app.main import build_providers
from app.observe.metrics import Metrics
from app.providers.clients import UpstreamClients
from app.security.principal import Principal
from app.tools.registry import ToolRegistry


async def test_a_request_cancelled_mid_open_leaves_no_lease_behind(tmp_path: Path) -> None:
    settings = Settings(
        api_key="open-cancelled-test-key-5f2c9a71d3e8b6",
        data_dir=tmp_path,
        upstream_base_url="http://127.0.0.1:9/v1",  # never called: the turn is cancelled
        upstream_api_key="unused",
    )
    store = Store.open(settings.db_path)
    clients = UpstreamClients(max_connections=4)
    metrics = Metrics()
    turns = TurnManager(store, metrics)
    serving = ChatServing(
        TurnServing(
            settings=settings,
            store=store,
            turns=turns,
            tools=ToolRegistry([]),
            providers=build_providers(settings, clients, KeyStateStore(store.engine)),
            metrics=metrics,
        )
    )
    request = ChatCompletionRequest.model_validate(
        {"model": "courier", "messages": [{"role": "user", "content": "hello"}]}
    )
    holder = sqlite3.connect(settings.db_path, isolation_level=None, timeout=30)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the open waits on the write lock
        start = asyncio.create_task(
            serving.start(
                request,
                Principal(owner="o" * 16),
                None,
                retry=Retry(digest="d"),
                on_behalf=OnBehalf(),
            )
        )
        await asyncio.sleep(0.3)
        start.cancel()
        await asyncio.gather(start, return_exceptions=True)
        assert start.cancelled()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # The open commits once the lock is free; the orphaned turn then closes itself.
    for _ in range(200):
        await asyncio.sleep(0.05)
        with sqlite3.connect(settings.db_path) as db:
            turns_rows = db.execute("SELECT exit_reason FROM turn").fetchall()
            leases = db.execute("SELECT count(*) FROM session WHERE lease IS NOT NULL")
            if turns_rows and turns_rows[0][0] is not None and leases.fetchone() == (0,):
                break
    assert turns_rows == [("cancelled",)]
    with sqlite3.connect(settings.db_path) as db:
        assert db.execute("SELECT count(*) FROM session WHERE lease IS NOT NULL").fetchone() == (0,)
    await clients.aclose()
    store.close()
