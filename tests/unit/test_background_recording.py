"""A background response's recording (`app/api/responses/background.py`) against a real
store: the events a live reader gets are the ones a replay after a restart gets, numbered
the same; a flush of several running responses is one commit; a restart's repair marks an
unfinished response `failed` and appends its terminal event after the stored ones."""

from __future__ import annotations

import json

import pytest

from app.agent.events import TurnText
from app.agent.turns.handle import TurnHandle
from app.api.responses.background import BackgroundRuns, Recording, repair_unfinished
from app.api.responses.render import ResponseShell
from app.api.responses.wire import ResponseCreateRequest
from app.db import background_store as bg
from app.db import session_query as q
from app.db.session_models import ResponseRow
from app.db.stats import count_db_work
from app.db.store import Store
from tests.support.store import db_path, store  # noqa: F401  (pytest fixtures)

REQUEST = ResponseCreateRequest.model_validate(
    {"model": "courier", "input": "hi", "background": True}
)


def _opened(store: Store, runs: BackgroundRuns, n: int) -> Recording:  # noqa: F811  (the fixture name)
    session_id = f"sess_{n}"
    store.create_session(session_id=session_id, owner="o", profile="p", system_prompt="x")
    shell = ResponseShell(id=f"resp_{n}", model="courier", request=REQUEST, session_id=session_id)
    recording = Recording(shell, TurnHandle(f"turn_{n}", session_id), owner="o")
    row = ResponseRow(
        id=shell.id,
        session_id=session_id,
        owner="o",
        body=json.dumps(shell.body(status="queued", output=[])),
        background=True,
        status="queued",
    )
    with store.unit():
        runs.open(row, recording)
    runs.attach(recording)
    return recording


async def _frames(recording: Recording, after: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    async for chunk in recording.follow(after, keepalive_s=60):
        for line in chunk.decode().splitlines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


async def test_live_and_replayed_events_are_the_same_and_numbered_alike(
    store: Store,  # noqa: F811
) -> None:
    runs = BackgroundRuns(store, flush_s=60)
    recording = _opened(store, runs, 1)
    for word in ("one ", "two ", "three"):
        recording.handle.publish(TurnText(word))
        await runs.flush()
    final = recording.shell.body(status="completed", output=[])
    await runs.finish(recording, final, last_message_id=0)
    live = await _frames(recording, -1)
    stored = [json.loads(e) for e in bg.events_after(store, response_id="resp_1", after=-1)]
    assert stored == live
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    assert live[-1]["type"] == "response.completed"
    assert [json.loads(e) for e in bg.events_after(store, response_id="resp_1", after=4)] == (
        live[5:]
    )
    row = q.get_response(store, response_id="resp_1")
    assert row is not None and row.status == "completed"
    assert row.events_through == len(live) - 1


async def test_one_flush_stores_every_running_response_in_one_commit(
    store: Store,  # noqa: F811
) -> None:
    runs = BackgroundRuns(store, flush_s=60)
    recordings = [_opened(store, runs, n) for n in range(3)]
    commits: list[int] = []
    count_db_work(store.engine, on_commit=lambda: commits.append(1), on_statement=lambda: None)
    for r in recordings:
        r.handle.publish(TurnText("delta"))
    await runs.flush()
    assert len(commits) == 1
    await runs.flush()  # nothing new: no commit at all
    assert len(commits) == 1
    for r in recordings:
        row = q.get_response(store, response_id=r.shell.id)
        assert row is not None and (row.status, row.events_through) == ("in_progress", 5)


@pytest.mark.parametrize("flushed", [False, True])
async def test_a_restart_repairs_an_unfinished_response_as_failed(
    store: Store,  # noqa: F811
    flushed: bool,
) -> None:
    runs = BackgroundRuns(store, flush_s=60)
    recording = _opened(store, runs, 7)
    recording.handle.publish(TurnText("half an answer"))
    if flushed:
        await runs.flush()
    assert repair_unfinished(store) == 1
    row = q.get_response(store, response_id="resp_7")
    assert row is not None and row.status == "failed"
    events = [json.loads(e) for e in bg.events_after(store, response_id="resp_7", after=-1)]
    # The opening stored `response.created`: even a response never flushed replays validly.
    assert events[0]["type"] == "response.created"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "failed"
    assert json.loads(row.body)["error"]["code"] == "server_error"
    assert repair_unfinished(store) == 0  # terminal now: never repaired twice


async def test_a_purge_deletes_a_background_responses_stored_events(
    store: Store,  # noqa: F811
) -> None:
    """The chunks hold the answer's text: a purged session keeps none of it."""
    runs = BackgroundRuns(store, flush_s=60)
    recording = _opened(store, runs, 9)
    recording.handle.publish(TurnText("private words"))
    await runs.flush()
    assert bg.events_after(store, response_id="resp_9", after=-1)
    q.purge_session(store, session_id="sess_9")
    assert bg.events_after(store, response_id="resp_9", after=-1) == []
