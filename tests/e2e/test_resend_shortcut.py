"""A resent history is translated from its stored prefix on, and stores what the full path
stores; a prefix that moves before the lease sends the request down the full path.

In-process serving objects over a real SQLite store, the simulator as the upstream. The
same conversation runs twice, once with the shortcut and once with it switched off, and
the two stores must hold the same rows and transcript keys. What is counted: how many
messages each opening was handed to translate and append.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from app.agent.opening.lifecycle import SessionLifecycle, visible_answer
from app.agent.turn_request import TurnRequest
from app.agent.turns.manager import TurnManager
from app.api.chat.parse import validated
from app.api.chat.serving import ChatServing, Shortcut
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
from tests.support.sim import Simulator

PRINCIPAL = Principal(owner="resend-owner-0123456789")
_digests = itertools.count()
ANSWERS = [{"reply": {"text": f"Answer {i}."}} for i in range(40)]


@dataclass
class Rig:
    serving: ChatServing
    store: Store
    db: Path
    opened: list[TurnRequest]
    said: str = ""

    async def send(self, messages: list[dict[str, Any]], shortcut: Shortcut | None = None) -> str:
        """One request to its end: the session id it ran in (its answer: `self.said`)."""
        data = {"model": "courier", "messages": messages}
        if shortcut is None:
            shortcut = await self.serving.shortcut(data, PRINCIPAL, {})
        chat = shortcut.request if shortcut is not None else await validated(data)
        started = await self.serving.start(
            chat,
            PRINCIPAL,
            None,
            retry=Retry(digest=f"d{next(_digests)}"),
            on_behalf=OnBehalf(),
            shortcut=shortcut,
        )
        await started.handle.task
        self.said = visible_answer(started.handle).text
        return started.session_id

    def stored(self, session_id: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """(the live rows, the transcript keys) of a session, without ids or times."""
        with sqlite3.connect(self.db) as db:
            rows = db.execute(
                "SELECT role, content, tool_calls, tool_call_id FROM message"
                " WHERE session_id = ? AND active = 1 ORDER BY id",
                (session_id,),
            ).fetchall()
            keys = db.execute(
                "SELECT prefix_hash, position FROM transcript_key WHERE session_id = ?"
                " ORDER BY position, id",
                (session_id,),
            ).fetchall()
        return rows, keys


@pytest.fixture
async def rigs(
    tmp_path: Path, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[[str], Rig]]:
    sim.script(ANSWERS)
    made: list[tuple[Store, UpstreamClients]] = []
    opened: dict[int, list[TurnRequest]] = {}
    real_open = SessionLifecycle.open

    def counting_open(self: SessionLifecycle, req: TurnRequest, **kw: Any) -> Any:
        opened[id(self)].append(req)
        return real_open(self, req, **kw)

    monkeypatch.setattr(SessionLifecycle, "open", counting_open)

    def make(name: str) -> Rig:
        settings = Settings(
            api_key="resend-shortcut-test-key-8d1e4c2b9a",
            data_dir=tmp_path / name,
            upstream_base_url=f"{sim.base_url}/v1",
            upstream_api_key="sim",
        )
        store = Store.open(settings.db_path)
        clients = UpstreamClients(max_connections=4)
        metrics = Metrics()
        turn_serving = TurnServing(
            settings=settings,
            store=store,
            turns=TurnManager(store, metrics),
            tools=ToolRegistry([]),
            providers=build_providers(settings, clients, KeyStateStore(store.engine)),
            metrics=metrics,
        )
        made.append((store, clients))
        opened[id(turn_serving.sessions)] = []
        return Rig(
            ChatServing(turn_serving), store, settings.db_path, opened[id(turn_serving.sessions)]
        )

    yield make
    for store, clients in made:
        await clients.aclose()
        store.close()


def _say(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"Question {i}?"}


async def _converse(rig: Rig, turns: int) -> tuple[str, list[dict[str, Any]]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    sid = ""
    for i in range(turns):
        history.append(_say(i))
        sid = await rig.send(history)
        history.append({"role": "assistant", "content": rig.said})
    return sid, history


async def test_a_resent_history_is_translated_from_its_stored_prefix_on(
    rigs: Callable[[str], Rig], sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = rigs("fast")
    sid, _ = await _converse(fast, 6)
    # The first request is new (nothing stored): the full path, all of it. Every later one
    # hands the opening only its new user message, resuming the stored prefix.
    assert [len(r.messages) for r in fast.opened] == [1, 1, 1, 1, 1, 1]
    assert [r.resume is not None for r in fast.opened] == [False, True, True, True, True, True]
    assert {r.resume.session_id for r in fast.opened if r.resume} == {sid}

    full = rigs("full")

    async def no_shortcut(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(ChatServing, "shortcut", no_shortcut)
    sim.script(ANSWERS)  # the same answers again
    full_sid, _ = await _converse(full, 6)
    assert [len(r.messages) for r in full.opened] == [1, 3, 5, 7, 9, 11]
    # The same rows and the same transcript keys either way.
    assert fast.stored(sid) == full.stored(full_sid)


async def test_a_prefix_that_moves_before_the_lease_takes_the_full_path(
    rigs: Callable[[str], Rig],
) -> None:
    """Another request continues the conversation differently between the shortcut's
    lookup and the opening: the opening refuses the stale point, the full path retracts
    the other branch, as it would have without the shortcut."""
    rig = rigs("stale")
    sid, history = await _converse(rig, 2)
    mine = [*history, _say(10)]
    data = {"model": "courier", "messages": mine}
    shortcut = await rig.serving.shortcut(data, PRINCIPAL, {})
    assert shortcut is not None and shortcut.resumed.point.position == 4
    assert await rig.send([*history, _say(11)]) == sid  # moves the stored prefix on
    assert await rig.send(mine, shortcut) == sid
    resumed = [r.resume is not None for r in rig.opened]
    # The stale attempt is refused before any write, then the full path runs (5 messages).
    assert resumed == [False, True, True, True, False]
    assert len(rig.opened[-1].messages) == 5
    rows, _ = rig.stored(sid)
    contents = [r[1] for r in rows]
    assert contents[:4] == [m["content"] for m in history[1:]]
    assert "Question 11?" not in contents  # the other branch was retracted
    assert contents[4] == "Question 10?"
