"""How many transactions a turn costs, counted over HTTP by the server's engine hooks.

Two per text turn (one before the upstream call, one after), whether the session is new
or continued; a tool batch adds its intent commit and one per result, in which a store
tool's own change (the to-do list, memory) rides. Counting, not timing: a regression
that adds a commit to the turn path fails here on any machine.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.postgres import POSTGRES, Cluster
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.stores import BACKENDS

METRICS_KEY = "metrics-key-0123456789abcdef"
PRODUCTION = {
    "COURIER_METRICS_API_KEY": METRICS_KEY,
    "COURIER_VERIFY_LIVE_LOG": "0",
    "COURIER_SEARCH_INDEX_INTERVAL_S": "0",
}
"""The suite's check of kept state against the database reads on every call: counted here,
a read the kept state saves would look the same as the check that replaced it. The search
index's batches (one commit a second for all turns) are off: counted per turn, one could
land in any turn's figures."""


FIRST_TURN: dict[str, int] = {}
"""What the server process's first turn cost (commits, statements), taken by `counted`."""


STORE_BACKENDS = BACKENDS
"""Every count holds on SQLite and on PostgreSQL: the same statements, the same commits."""


def _on(backend: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """PRODUCTION's settings, on a PostgreSQL database of the caller's own for that backend
    (dropped when the caller's scope ends)."""
    if backend != POSTGRES:
        return PRODUCTION
    cluster: Cluster = request.getfixturevalue("pg_cluster")
    database = cluster.create_database()
    request.addfinalizer(lambda: cluster.drop_database(database))
    return PRODUCTION | {"COURIER_DATABASE_URL": cluster.url(database)}


def _started(server: Server) -> Server:
    """The server, checked to run where it was told: a PostgreSQL database it migrated,
    not a SQLite file beside it (the counts would pass there too)."""
    url = server.env.get("COURIER_DATABASE_URL")
    assert (server.data_dir / "courier.db").exists() is (url is None)
    return server


@pytest.fixture(scope="module")
def counted(
    module_servers: ServerFactory,
    simulator: Simulator,
    backend: str,
    request: pytest.FixtureRequest,
) -> Server:
    srv = _started(module_servers(**_on(backend, request)))
    # The process's first session of a tool set stores the set, once (app/db/tool_sets.py):
    # taken here, no counted turn's figures depend on which test runs first.
    simulator.reset()
    simulator.script([{"reply": {"text": "first"}}])
    _, FIRST_TURN["commits"], FIRST_TURN["statements"] = _turn(srv, stream=True)
    return srv


def _metrics(server: Server) -> dict[str, int]:
    body = httpx.get(
        f"{server.base_url}/metrics",
        headers={"Authorization": f"Bearer {METRICS_KEY}"},
        timeout=10,
    ).text
    values: dict[str, int] = {}
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("courier_db_") and name.endswith("_total"):
            values[name] = int(float(value))
    return values


def _counts(server: Server) -> tuple[int, int]:
    values = _metrics(server)
    return values["courier_db_commits_total"], values["courier_db_statements_total"]


def _turn(
    server: Server, *, stream: bool, session: str | None = None, key: str | None = None
) -> tuple[str, int, int]:
    """Run one turn to its end; (session id, commits, statements) it cost."""
    before = _counts(server)
    headers = server.headers(**({"X-Session-Id": session} if session else {}))
    if key is not None:
        headers["Idempotency-Key"] = key
    body: dict[str, Any] = {
        "model": "courier",
        "stream": stream,
        "messages": [{"role": "user", "content": "hello"}],
    }
    url = f"{server.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as resp:
        text = resp.read().decode()
        sid = resp.headers["x-session-id"]
    assert resp.status_code == 200 and '"error"' not in text, text
    after = _counts(server)
    return sid, after[0] - before[0], after[1] - before[1]


@pytest.mark.parametrize("stream", [True, False])
def test_a_text_turn_commits_twice(counted: Server, sim: Simulator, stream: bool) -> None:
    sim.script([{"reply": {"text": "one two three"}}] * 3)
    sid, commits, statements = _turn(counted, stream=stream)
    assert commits == 2
    # Today's reads and writes (a lease fence in the closing transaction only: the opening
    # one created the session leased, with its transcript head in the insert; the index
    # insert reading the compaction count and the newest row id itself; the roll-up adding
    # to the kept row's cost without reading it); this bound catches a query added to the
    # path (a roll-up's read of the cost made it 13).
    assert statements <= 12, statements
    for _ in range(2):
        _, commits, statements = _turn(counted, stream=stream, session=sid)
        assert commits == 2
        # The row the lease's taking returned is the one the first preflight reads: a
        # read of it on the event loop and the roll-up's read of the cost made this 16.
        assert statements <= 14, statements
    sim.assert_script_done()


def test_the_first_session_of_a_tool_set_stores_the_set_in_its_opening(
    counted: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "second"}}])
    _, commits, statements = _turn(counted, stream=True)
    # The same two commits; the set's insert is one statement more, the first time only.
    assert FIRST_TURN["commits"] == commits == 2
    assert FIRST_TURN["statements"] == statements + 1, (FIRST_TURN, statements)


def test_a_tool_turn_adds_only_intent_and_result_commits(counted: Server, sim: Simulator) -> None:
    call = {"name": "list_files", "arguments": {}}
    sim.script([{"reply": {"tool_calls": [call]}}, {"reply": {"text": "nothing there"}}])
    on_loop = _metrics(counted)["courier_db_loop_commits_total"]
    _, commits, statements = _turn(counted, stream=True)
    sim.assert_script_done()
    # Before the call, intent (the assistant's calls), the one result, after the call.
    assert commits == 4
    # The second call's preflight reads the kept row, not the database (that read and
    # each call's read of the cost made this 23).
    assert statements <= 20, statements
    # Every one of them on the store's writer thread, the tool result's too.
    assert _metrics(counted)["courier_db_loop_commits_total"] - on_loop == 0


def test_a_search_first_brings_the_index_up_to_date(counted: Server, sim: Simulator) -> None:
    """New messages reach the full-text index in batches; a search catches up first, in
    one commit of its own, and so finds the words of the turn that asks."""
    call = {"name": "session_search", "arguments": {"query": "kumquat"}}
    sim.script([{"reply": {"tool_calls": [call]}}, {"reply": {"text": "found it"}}])
    before = _counts(counted)
    headers = counted.headers()
    body = {"model": "courier", "messages": [{"role": "user", "content": "the kumquat jar"}]}
    url = f"{counted.base_url}/v1/chat/completions"
    assert httpx.post(url, json=body, headers=headers, timeout=30).status_code == 200
    sim.assert_script_done()
    after = _counts(counted)
    # Opening, intent, the index's catch-up, the result, closing.
    assert after[0] - before[0] == 5
    assert "the **kumquat** jar" in _tool_result(sim)
    assert "(this session)" in _tool_result(sim)


def _tool_result(sim: Simulator) -> str:
    """The newest tool message of the last chat request Courier sent upstream."""
    body = json.loads(sim.requests("/v1/chat/completions")[-1]["body"])
    return str([m for m in body["messages"] if m["role"] == "tool"][-1]["content"])


def test_a_store_tool_s_change_rides_in_its_result_commit(counted: Server, sim: Simulator) -> None:
    add = {"name": "todo", "arguments": {"action": "add", "items": ["check the logs"]}}
    sim.script([{"reply": {"tool_calls": [add]}}, {"reply": {"text": "added"}}])
    sid, commits, statements = _turn(counted, stream=True)
    sim.assert_script_done()
    # Opening, intent, the list's change with its result, closing: the change had its own.
    assert commits == 4
    assert statements <= 21, statements
    assert "check the logs" in _tool_result(sim)
    # The change is stored: the next turn's list shows it.
    listed = {"name": "todo", "arguments": {"action": "list"}}
    sim.script([{"reply": {"tool_calls": [listed]}}, {"reply": {"text": "listed"}}])
    _, commits, _ = _turn(counted, stream=True, session=sid)
    assert commits == 4
    assert "check the logs" in _tool_result(sim)


def test_a_refused_store_change_stores_its_error_and_changes_nothing(
    counted: Server, sim: Simulator
) -> None:
    add = {"name": "todo", "arguments": {"action": "add", "items": ["first"]}}
    sim.script([{"reply": {"tool_calls": [add]}}, {"reply": {"text": "added"}}])
    sid, _, _ = _turn(counted, stream=True)
    # Valid arguments; the id check fails inside the transaction, after its upsert.
    bad = {
        "name": "todo",
        "arguments": {"action": "update", "items": [{"id": 99, "status": "done"}]},
    }
    sim.script([{"reply": {"tool_calls": [bad]}}, {"reply": {"text": "no such item"}}])
    _, commits, _ = _turn(counted, stream=True, session=sid)
    sim.assert_script_done()
    assert commits == 4
    assert _tool_result(sim).startswith("error:")
    listed = {"name": "todo", "arguments": {"action": "list"}}
    sim.script([{"reply": {"tool_calls": [listed]}}, {"reply": {"text": "listed"}}])
    _turn(counted, stream=True, session=sid)
    assert "first" in _tool_result(sim) and "99" not in _tool_result(sim)


@pytest.mark.parametrize("stream", [True, False])
def test_a_text_turn_commits_nothing_on_the_event_loop(
    counted: Server, sim: Simulator, stream: bool
) -> None:
    """Both of a text turn's transactions run on the store's writer thread: a slow write
    holds that thread, never the loop every other stream is served from."""
    sim.script([{"reply": {"text": "off the loop"}}] * 2)
    before = _metrics(counted)["courier_db_loop_commits_total"]
    sid, commits, _ = _turn(counted, stream=stream)
    _, more, _ = _turn(counted, stream=stream, session=sid)
    assert (commits, more) == (2, 2)
    assert _metrics(counted)["courier_db_loop_commits_total"] == before
    sim.assert_script_done()


@pytest.mark.parametrize("stream", [True, False])
def test_a_keyed_turn_records_itself_in_the_same_two_commits(
    counted: Server, sim: Simulator, stream: bool
) -> None:
    """Durable idempotency writes its record in the turn's opening and closing units: an
    `Idempotency-Key` costs no commit of its own, and none on the event loop."""
    sim.script([{"reply": {"text": "keyed answer"}}])
    before = _metrics(counted)["courier_db_loop_commits_total"]
    key = f"commit-count-{stream}"
    _, commits, _ = _turn(counted, stream=stream, key=key)
    assert commits == 2
    assert _metrics(counted)["courier_db_loop_commits_total"] == before
    # The record holds the finished turn: a replay answers it without running it again.
    _, commits, _ = _turn(counted, stream=stream, key=key)
    assert commits == 0
    sim.assert_script_done()


def test_the_first_turn_after_a_restart_reads_the_log_once(
    sim: Simulator, servers: ServerFactory, backend: str, request: pytest.FixtureRequest
) -> None:
    """The live log is not in memory after a restart: the opening unit reads it from the
    database once, for the open-call check and the repair both (it read it twice)."""
    server = _started(servers(**_on(backend, request)))
    sim.script([{"reply": {"text": "first"}}, {"reply": {"text": "second"}}])
    sid, _, _ = _turn(server, stream=True)
    server.stop()
    server.start()
    _, commits, statements = _turn(server, stream=True, session=sid)
    server.stop()
    sim.assert_script_done()
    assert commits == 2
    # A continued session's count with the one read of the log: reading it twice (17)
    # does not fit.
    assert statements <= 16, statements
