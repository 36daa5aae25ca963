"""A token bound to one session reaches that session and nothing of any other, on every route.

Two sessions of one key, S1 and S2, each with a stored response and a standing grant; S1
also with a keyed turn and, while the checks run, a turn waiting on a pending approval.
Tokens bound to S2 (minted by the key, and by the admin key with the admin scope) get, for
each of S1's resources on each route, the 404 the key itself gets for an id that does not
exist; lists leave S1 out; none of it stops, decides, revokes or deletes anything; a
replay of S1's request is a new request of S2's. S2's resources still work with the token.

The same table runs for one key's end users: a request whose headers name bob gets that
404 for every resource of alice's session, while alice's header, or none, reaches it. And
the model in a bound token's turn reaches what the token does: `session_search` finds the
bound session alone.

The table below names every route a real `create_app` registers: a route missing from it
fails `test_every_route_is_in_the_table`, so a new route is covered or the suite says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.approvals import BackgroundTurn, call, pending
from tests.support.bindings import ROUTES, Case, Ids, Listing, chat
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

SECRET = "token-secret-" + "b" * 40
ADMIN_KEY = "admin-key-0123456789abcdef"
SCOPES = ["approvals", "chat", "sessions:read"]
USER_HEADER = "X-OpenWebUI-User-Id"
"""An app's end-user header, configured on the server (COURIER_END_USER_HEADERS)."""


MISSING = Ids("sess_missing000000", "resp_missing000000", "appr_missing0000", "grant_missing000")


@dataclass
class World:
    server: Server
    s1: Ids
    s2: Ids
    keyed_body: dict[str, Any]
    """The body of S1's turn sent with `Idempotency-Key: key-s1`."""
    keyed_answer: dict[str, Any]
    """What that turn answered."""
    tokens: dict[str, str]
    """Tokens bound to S2, by who minted them."""


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bindings-ws")


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, ws: Path) -> Server:
    return module_servers(
        COURIER_ADMIN_API_KEY=ADMIN_KEY,
        COURIER_TOKENS_ENABLED="true",
        COURIER_TOKEN_SECRET=SECRET,
        # A shared workspace: a recursive delete asks a human, so turns can be parked.
        COURIER_WORKSPACE=str(ws),
        COURIER_APPROVAL_TIMEOUT_S="120",
        COURIER_END_USER_HEADERS=USER_HEADER,
    )


def _key(server: Server, key: str | None = None, **headers: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key or server.api_key}", **headers}
    return httpx.Client(base_url=server.base_url, headers=headers, timeout=60)


def _wait_for_approval(server: Server, session_id: str) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for row in pending(server):
            if row["session_id"] == session_id:
                return str(row["id"])
        time.sleep(0.05)
    raise AssertionError(f"no approval became pending in {session_id}")


def _park(sim: Simulator, server: Server, session_id: str, command: str) -> BackgroundTurn:
    """A turn on `session_id` that waits for a human to decide `command`."""
    sim.script([{"reply": {"tool_calls": [call("terminal", command=command)]}}])
    return BackgroundTurn(server, "tidy up", headers={"X-Session-Id": session_id}).start()


def _build_session(sim: Simulator, server: Server, name: str, **headers: str) -> Ids:
    """A session with a stored response and a standing grant (its approval: the test's),
    made by the key with `headers` (an end user's, say)."""
    with _key(server, **headers) as key:
        sim.script([{"reply": {"text": f"hello from {name}"}}])
        created = key.post("/v1/responses", json={"model": "courier", "input": f"hello {name}"})
        assert created.status_code == 200, created.text
        response, session = created.json()["id"], created.json()["session_id"]
        # A `session` grant, from a decided approval (the command's `cd` fails: nothing runs).
        turn = _park(sim, server, session, f"cd nowhere-{name} && rm -rf *")
        approval = _wait_for_approval(server, session)
        sim.script([{"reply": {"text": "granted"}}])
        decided = key.post(f"/v1/approvals/{approval}", json={"decision": "session"})
        assert decided.status_code == 200, decided.text
        grant = decided.json()["grant"]["id"]
        turn.join()
        return Ids(session, response, "", grant)


def _parked(sim: Simulator, server: Server, ids: Ids) -> tuple[Ids, BackgroundTurn]:
    """`ids` with the approval a turn of that session now waits on."""
    turn = _park(sim, server, ids.session, "cd nowhere && rm -rf ./*")
    return replace(ids, approval=_wait_for_approval(server, ids.session)), turn


@contextmanager
def _while_parked(sim: Simulator, server: Server, ids: Ids) -> Iterator[Ids]:
    """`ids` with the approval a turn of that session waits on while the block runs; the
    turn is then denied and joined."""
    parked, turn = _parked(sim, server, ids)
    try:
        yield parked
    finally:
        sim.script([{"reply": {"text": "released"}}])
        with _key(server) as key:
            key.post(f"/v1/approvals/{parked.approval}", json={"decision": "deny"})
        turn.join()


def _mint(server: Server, key: str, **body: Any) -> str:
    with _key(server, key) as client:
        resp = client.post("/v1/tokens", json=body)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["token"])


@pytest.fixture(scope="module")
def world(server: Server, simulator: Simulator) -> World:
    simulator.reset()
    s1, s2 = _build_session(simulator, server, "s1"), _build_session(simulator, server, "s2")
    body = {"model": "courier", "messages": [{"role": "user", "content": "keyed question"}]}
    simulator.script([{"reply": {"text": "the keyed answer"}}])
    with _key(server) as key:
        answer = key.post(
            "/v1/chat/completions",
            json=body,
            headers={"X-Session-Id": s1.session, "Idempotency-Key": "key-s1"},
        )
    assert answer.status_code == 200, answer.text
    tokens = {
        "its key": _mint(server, server.api_key, scopes=SCOPES, session_id=s2.session),
        "the admin key": _mint(server, ADMIN_KEY, scopes=["admin"], session_id=s2.session),
    }
    return World(server, s1, s2, body, answer.json(), tokens)


def _shape(resp: httpx.Response, ids: Ids) -> Any:
    """The error with the id it names blanked: what must not tell S1 from a missing one."""
    text = resp.text
    for value in astuple(ids):
        if value:
            text = text.replace(value, "<id>")
    return resp.status_code, json.loads(text) if text else None


def _calls_of(key: httpx.Client, session_id: str) -> int:
    return int(key.get(f"/v1/sessions/{session_id}/usage").json()["total_calls"])


def _listing_problem(
    entry: Listing, resp: httpx.Response, *, hidden: Ids, own: Ids, key: httpx.Client
) -> str | None:
    """None if the list leaves out every id of `hidden` and, for the usage tally, counts
    exactly the calls of the token's own session."""
    if resp.status_code != 200:
        return f"{entry.name}: {resp.status_code} {resp.text[:200]}"
    leaked = [v for v in astuple(hidden) if v and v in resp.text]
    if leaked:
        return f"{entry.name}: shows {leaked}"
    if entry.shown(own) is None:
        calls, made = sum(day["calls"] for day in resp.json()["data"]), _calls_of(key, own.session)
        if calls != made:
            return f"{entry.name}: counts {calls} calls, its session made {made}"
    return None


def _entries() -> Iterator[Case | Listing]:
    for entries in ROUTES.values():
        yield from entries


def _touched(key: httpx.Client, s1: Ids) -> list[str]:
    """What of S1 is no longer as it was: its turn waits, its approval is pending, its
    grant, response and session are there."""
    found = []
    if (status := key.get(f"/v1/approvals/{s1.approval}").json()["status"]) != "pending":
        found.append(f"S1's approval is {status}")
    if key.get(f"/v1/sessions/{s1.session}").status_code != 200:
        return [*found, "S1 was deleted"]
    turns = key.get(f"/v1/sessions/{s1.session}/turns").json()["data"]
    if "running" not in {t["status"] for t in turns}:
        found.append("S1's turn was stopped")
    grants = key.get("/v1/approvals/grants", params={"session_id": s1.session}).json()["data"]
    if [g["id"] for g in grants] != [s1.grant]:
        found.append("S1's grant was revoked")
    if key.get(f"/v1/responses/{s1.response}").status_code != 200:
        found.append("S1's response was deleted")
    return found


def _refused_everywhere(
    client: httpx.Client,
    hidden: Ids,
    *,
    own: Ids,
    key: httpx.Client,
    listings: set[str] | None = None,
) -> list[str]:
    """Every way `client` names `hidden`'s resources that does not answer exactly as the
    key does for an id that does not exist, and every list (of `listings`, None: all)
    that shows one of them."""
    problems = []
    for entry in _entries():
        got = entry.send(client, hidden)
        if isinstance(entry, Listing):
            if listings is None or entry.name in listings:
                problem = _listing_problem(entry, got, hidden=hidden, own=own, key=key)
                if problem:
                    problems.append(problem)
            continue
        missing = entry.send(key, MISSING)  # the key's own answer: no such id
        if got.status_code != 404 or _shape(got, hidden) != _shape(missing, MISSING):
            problems.append(
                f"{entry.name}: {got.status_code} {got.text[:200]} "
                f"(a missing id: {missing.text[:200]})"
            )
    return problems


def test_a_bound_token_gets_404_on_every_route_of_another_session(
    world: World, simulator: Simulator
) -> None:
    server = world.server
    problems: list[str] = []
    with _while_parked(simulator, server, world.s1) as s1, _key(server) as key:
        upstream = len(simulator.requests())
        for minter, token in world.tokens.items():
            with _key(server, token) as bound:
                found = _refused_everywhere(bound, s1, own=world.s2, key=key)
                problems += [f"token of {minter}: {p}" for p in found]
        problems += _touched(key, s1)
        if len(simulator.requests()) != upstream:
            problems.append("a request of the token reached the model")
    assert not problems, "\n".join(problems)


def test_a_replay_of_another_sessions_request_is_a_fresh_turn_of_its_own(
    world: World, simulator: Simulator
) -> None:
    """Not S1's completion, not a 404 or a 409 (either would tell the token that S1 used
    that key), and not S1's record overwritten: a token's keys and retries are its
    session's own, so the replay is a new question in S2."""
    server, s1, s2 = world.server, world.s1, world.s2
    upstream = len(simulator.requests())
    simulator.script(
        [
            {"reply": {"text": "fresh in s2"}},
            {"reply": {"text": "asked in s1"}},
            {"reply": {"text": "fresh again in s2"}},
        ]
    )
    with _key(server) as key, _key(server, world.tokens["its key"]) as bound:
        keyed = {"X-Session-Id": s2.session, "Idempotency-Key": "key-s1"}
        replay = bound.post("/v1/chat/completions", json=world.keyed_body, headers=keyed)
        assert replay.status_code == 200, replay.text
        assert replay.json()["id"] != world.keyed_answer["id"]
        assert replay.json()["choices"][0]["message"]["content"] == "fresh in s2"
        assert replay.headers["X-Session-Id"] == s2.session
        own = {"X-Session-Id": s1.session, "Idempotency-Key": "key-s1"}
        again = key.post("/v1/chat/completions", json=world.keyed_body, headers=own)
        assert again.json() == world.keyed_answer  # the key's record was not overwritten

        # The SDK's retry counter on a byte-identical body, moments after S1 asked it.
        body = {"model": "courier", "messages": [{"role": "user", "content": "asked twice"}]}
        first = key.post("/v1/chat/completions", json=body, headers={"X-Session-Id": s1.session})
        assert first.status_code == 200, first.text
        retried = bound.post(
            "/v1/chat/completions",
            json=body,
            headers={"X-Session-Id": s2.session, "x-stainless-retry-count": "1"},
        )
        assert retried.status_code == 200, retried.text
        assert retried.json()["id"] != first.json()["id"]
        assert retried.json()["choices"][0]["message"]["content"] == "fresh again in s2"
        assert retried.headers["X-Session-Id"] == s2.session
    simulator.assert_script_done()

    # From the database after a restart: each still gets its own.
    server.stop()
    server.start()
    with _key(server) as key, _key(server, world.tokens["its key"]) as bound:
        replayed = bound.post("/v1/chat/completions", json=world.keyed_body, headers=keyed)
        assert replayed.json() == replay.json()
        assert key.post("/v1/chat/completions", json=world.keyed_body, headers=own).json() == (
            world.keyed_answer
        )
    assert len(simulator.requests()) == upstream + 3  # nothing ran again


def _reached(
    phase: str,
    client: httpx.Client,
    own: Ids,
    *,
    hidden: Ids,
    key: httpx.Client,
    by_key: bool = False,
    listings: set[str] | None = None,
) -> list[str]:
    """What of `own`'s resources `client` (a token, or a key when `by_key`) did not get
    as it should in `phase`; in the `read` phase also the lists (of `listings`, None: all)
    that leave out its own or show `hidden`'s."""
    problems = []
    for entry in (e for e in _entries() if isinstance(e, Case) and e.phase == phase):
        wanted = entry.key_own if by_key and entry.key_own is not None else entry.own
        got = entry.send(client, own)
        if got.status_code != wanted:
            problems.append(f"{entry.name}: {got.status_code} {got.text[:200]}")
    if phase != "read":
        return problems
    for listing in (e for e in _entries() if isinstance(e, Listing)):
        if listings is not None and listing.name not in listings:
            continue
        got = listing.send(client, own)
        problem = _listing_problem(listing, got, hidden=hidden, own=own, key=key)
        shown = listing.shown(own)
        if problem is None and shown is not None and shown not in got.text:
            problem = f"{listing.name}: leaves out its own {shown}"
        if problem:
            problems.append(problem)
    return problems


def test_the_bound_token_still_reaches_its_own_session(world: World, simulator: Simulator) -> None:
    server = world.server
    s2, turn = _parked(simulator, server, world.s2)
    problems: list[str] = []
    with _key(server) as key, _key(server, world.tokens["its key"]) as bound:
        try:
            problems += _reached("read", bound, s2, hidden=world.s1, key=key)
            # An `always` grant would hold for every session: not the token's to give.
            always = bound.post(f"/v1/approvals/{s2.approval}", json={"decision": "always"})
            assert always.status_code == 403, always.text
            assert always.json()["error"]["code"] == "approval_refused"
            simulator.script([{"reply": {"text": "denied, fine"}}])
            problems += _reached("decide", bound, s2, hidden=world.s1, key=key)
        finally:
            turn.join()
        simulator.script([{"reply": {"text": f"answer {n}"}} for n in range(4)])
        for phase in ("idle", "last", "end"):
            problems += _reached(phase, bound, s2, hidden=world.s1, key=key)
        # A token names its session or is refused; it is never pinned silently.
        unnamed = chat(bound, "which session?", {})
        assert unnamed.status_code == 403, unnamed.text
        assert unnamed.json()["error"]["code"] == "token_session_mismatch"
    simulator.assert_script_done()
    assert not problems, "\n".join(problems)


END_USER_LISTS = {"sessions list", "search"}
"""The lists a request's end user narrows (approvals and grants are the operator's to
see, `/v1/usage` is the key's spend)."""


@dataclass
class EndUsers:
    alice: Ids
    bob: Ids
    """Only a session: what alice's lists must leave out."""


@pytest.fixture(scope="module")
def end_users(server: Server, simulator: Simulator) -> EndUsers:
    alice = _build_session(simulator, server, "alice", **{"X-Courier-End-User": "alice-e"})
    simulator.script([{"reply": {"text": "hello from bob"}}])
    with _key(server, **{USER_HEADER: "bob-e"}) as bob:
        made = chat(bob, "hello bob", {})
    assert made.status_code == 200, made.text
    return EndUsers(alice, Ids(made.headers["X-Session-Id"], "", "", ""))


@pytest.mark.parametrize("header", ["X-Courier-End-User", USER_HEADER])
def test_another_end_user_s_header_gets_404_on_every_route_of_a_session(
    server: Server, simulator: Simulator, end_users: EndUsers, header: str
) -> None:
    """Under one key, a request whose headers name bob reaches none of alice's session:
    the 404 of a missing id on every route, nothing stopped, decided or deleted."""
    problems: list[str] = []
    with _while_parked(simulator, server, end_users.alice) as alice, _key(server) as key:
        upstream = len(simulator.requests())
        with _key(server, **{header: "bob-e"}) as bob:
            problems += _refused_everywhere(
                bob, alice, own=end_users.bob, key=key, listings=END_USER_LISTS
            )
        problems += _touched(key, alice)
        if len(simulator.requests()) != upstream:
            problems.append("a request for bob reached the model")
    assert not problems, "\n".join(problems)


def test_an_end_user_reaches_its_own_session_and_the_key_without_one_reaches_it_too(
    server: Server, simulator: Simulator, end_users: EndUsers
) -> None:
    alice, turn = _parked(simulator, server, end_users.alice)
    hidden = end_users.bob
    problems: list[str] = []
    with _key(server) as key, _key(server, **{"X-Courier-End-User": "alice-e"}) as own:
        reach = partial(_reached, hidden=hidden, key=key, by_key=True, listings=END_USER_LISTS)
        try:
            problems += reach("read", own, alice)
            with _key(server, **{USER_HEADER: "alice-e"}) as via_app:
                problems += reach("read", via_app, alice)
            # No end user named: the app itself, with today's per-key reach.
            problems += [f"no header: {p}" for p in reach("read", key, alice, listings=set())]
            simulator.script([{"reply": {"text": "denied, fine"}}])
            problems += reach("decide", own, alice)
        finally:
            turn.join()
        simulator.script([{"reply": {"text": f"answer {n}"}} for n in range(4)])
        for phase in ("idle", "last", "end"):
            problems += reach(phase, own, alice)
    simulator.assert_script_done()
    assert not problems, "\n".join(problems)


def _tool_turn(
    sim: Simulator, client: httpx.Client, session_id: str, calls: list[dict[str, Any]]
) -> str:
    """A turn in `session_id` whose model makes `calls`: the next upstream request's body."""
    sim.reset()
    sim.script([{"reply": {"tool_calls": calls}}, {"reply": {"text": "done"}}])
    resp = chat(client, "look it up", {"X-Session-Id": session_id})
    assert resp.status_code == 200, resp.text
    sim.assert_script_done()
    return str(sim.requests()[-1]["body"])


def _session_of(sim: Simulator, client: httpx.Client, tag: str, user: str | None) -> str:
    """A new session whose opening message says `sesame-<tag>` and whose model saves the
    memory note `<tag>-note`."""
    sim.reset()
    sim.script(
        [
            {"reply": {"tool_calls": [call("memory", action="add", text=f"{tag}-note")]}},
            {"reply": {"text": "noted"}},
        ]
    )
    headers = {} if user is None else {"X-Courier-End-User": user}
    resp = chat(client, f"the walrus of {tag} says sesame-{tag}", headers)
    assert resp.status_code == 200, resp.text
    return str(resp.headers["X-Session-Id"])


def test_a_bound_turn_s_tools_reach_its_session_and_its_end_user_s_notes_only(
    server: Server, simulator: Simulator
) -> None:
    """The model in a turn a bound token runs is the token's reach too: `session_search`
    finds the bound session alone (not even its end user's other sessions), and `memory`
    holds that end user's notes, as a turn of the key in that session would (the key's own
    notes and another end user's stay out). The key in the same session still searches all
    of its end user's sessions: the binding, not the end user, narrows the search."""
    with _key(server) as key:
        a1 = _session_of(simulator, key, "a1", "alice-t")
        _session_of(simulator, key, "bob", "bob-t")
        _session_of(simulator, key, "key", None)
        a2 = _session_of(simulator, key, "a2", "alice-t")
        token = _mint(server, server.api_key, scopes=SCOPES, session_id=a2)
        calls = [call("session_search", query="walrus"), call("memory", action="list")]
        with _key(server, token) as bound:
            seen = _tool_turn(simulator, bound, a2, calls)
        assert "sesame-a2" in seen and "a1-note" in seen and "a2-note" in seen
        for other in (a1, "sesame-a1", "sesame-bob", "bob-note", "sesame-key", "key-note"):
            assert other not in seen, f"{other} reached the bound turn's next request"
        # Control: the key in the same session reaches alice's other session.
        unbound = _tool_turn(simulator, key, a2, calls)
        assert a1 in unbound and "sesame-a1" in unbound
        for other in ("sesame-bob", "bob-note", "sesame-key", "key-note"):
            assert other not in unbound, f"{other} reached the key's turn in alice's session"
