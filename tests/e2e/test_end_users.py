"""One API key, many end users, over HTTP against a real server and the scripted simulator:
each end user's memory notes and transcripts reach only that end user (however the app
names them), the sessions list is filtered, the end-user spend cap refuses, and an app's
chat id (a session header) continues the same session, for its own key and end user only.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

USER_HEADER = "X-OpenWebUI-User-Id"
CHAT_HEADER = "X-OpenWebUI-Chat-Id"
ADMIN_KEY = "end-users-admin-key-0123456789"


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory) -> Server:
    return module_servers(
        COURIER_END_USER_HEADERS=USER_HEADER,
        COURIER_SESSION_HEADERS=CHAT_HEADER,
        COURIER_ADMIN_API_KEY=ADMIN_KEY,
    )


def _as(via: str, user: str | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Headers and body fields naming `user` the way `via` says an app would."""
    if user is None:
        return {}, {}
    if via == "body user":
        return {}, {"user": user}
    if via == "X-Courier-End-User":
        return {"X-Courier-End-User": user}, {}
    if via == "safety_identifier":
        return {}, {"safety_identifier": user}
    return {USER_HEADER: user}, {}


def _chat(
    srv: Server,
    messages: list[dict[str, Any]],
    *,
    headers: dict[str, str] | None = None,
    key: str | None = None,
    **body: Any,
) -> httpx.Response:
    auth = {"Authorization": f"Bearer {key or srv.api_key}"}
    return httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": messages, **body},
        headers={**auth, **(headers or {})},
        timeout=60,
    )


def _say(srv: Server, text: str, *, via: str, user: str | None) -> httpx.Response:
    headers, body = _as(via, user)
    resp = _chat(srv, [{"role": "user", "content": text}], headers=headers, **body)
    assert resp.status_code == 200, resp.text
    return resp


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": args}


def _last_request(sim: Simulator) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = json.loads(sim.requests()[-1]["body"])["messages"]
    return messages


def _recall(srv: Server, sim: Simulator, word: str, *, via: str, user: str | None) -> Any:
    """A new session for `user` whose model lists its notes and searches for `word`: what
    its prompt held, and what the two tools answered."""
    sim.reset()
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        _call("memory", action="list"),
                        _call("session_search", query=word),
                    ]
                }
            },
            {"reply": {"text": "recalled"}},
        ]
    )
    _say(srv, "what do you know?", via=via, user=user)
    sim.assert_script_done()
    first, second = (json.loads(r["body"])["messages"] for r in sim.requests())
    notes, found = [m["content"] for m in second if m["role"] == "tool"]
    return first[0]["content"], notes, found


VIAS = ["body user", "X-Courier-End-User", USER_HEADER, "safety_identifier"]


@pytest.mark.parametrize("via", VIAS)
def test_notes_and_transcripts_reach_only_their_own_end_user(
    srv: Server, sim: Simulator, via: str
) -> None:
    tag = via.lower().replace(" ", "").replace("-", "")
    alice, bob = f"alice-{tag}", f"bob-{tag}"
    note = f"alice-{tag} keeps bees"
    word = f"zanzibar{tag}"
    sim.reset()
    sim.script(
        [
            {"reply": {"tool_calls": [_call("memory", action="add", text=note)]}},
            {"reply": {"text": "noted"}},
        ]
    )
    _say(srv, f"remember this; my password is {word}", via=via, user=alice)
    sim.assert_script_done()

    prompt, notes, found = _recall(srv, sim, word, via=via, user=bob)
    assert note not in prompt and note not in notes and "Memory is empty" in notes
    assert found.startswith("No messages in your sessions match") and "password" not in found

    # The same key with no end user at all sees none of an end user's records either.
    prompt, notes, found = _recall(srv, sim, word, via=via, user=None)
    assert note not in prompt and note not in notes
    assert "password" not in found

    prompt, notes, found = _recall(srv, sim, word, via=via, user=alice)
    assert note in prompt  # the new session's frozen memory block
    assert note in notes
    assert f"my password is **{word}**" in found


def test_bob_s_memory_writes_leave_alice_s_notes_alone(srv: Server, sim: Simulator) -> None:
    via = "X-Courier-End-User"
    for user, text in (("alice-w", "alice likes tea"), ("bob-w", "bob likes coffee")):
        sim.reset()
        sim.script(
            [
                {"reply": {"tool_calls": [_call("memory", action="add", text=text)]}},
                {"reply": {"text": "noted"}},
            ]
        )
        _say(srv, "remember", via=via, user=user)
    sim.reset()
    sim.script(
        [
            {"reply": {"tool_calls": [_call("memory", action="remove", old_text="likes")]}},
            {"reply": {"text": "removed"}},
        ]
    )
    _say(srv, "forget it", via=via, user="bob-w")
    [removed] = [m["content"] for m in _last_request(sim) if m["role"] == "tool"]
    assert removed.startswith("Removed") and "tea" not in removed
    _, notes, _ = _recall(srv, sim, "tea", via=via, user="alice-w")
    assert "alice likes tea" in notes and "coffee" not in notes


def test_the_key_itself_may_name_an_end_user_s_session_which_runs_as_that_end_user(
    srv: Server, sim: Simulator
) -> None:
    sim.reset()
    sim.script(
        [
            {"reply": {"tool_calls": [_call("memory", action="add", text="kim drinks tea")]}},
            {"reply": {"text": "noted"}},
        ]
    )
    sid = _say(srv, "remember", via="X-Courier-End-User", user="kim-k").headers["x-session-id"]
    sim.reset()
    sim.script(
        [
            {"reply": {"tool_calls": [_call("memory", action="list")]}},
            {"reply": {"text": "listed"}},
        ]
    )
    # No end user: the app itself, holding the key, continues kim's session by its id.
    resp = _chat(srv, [{"role": "user", "content": "list"}], headers={"X-Session-Id": sid})
    assert resp.status_code == 200 and resp.headers["x-session-id"] == sid
    notes = [m["content"] for m in _last_request(sim) if m["role"] == "tool"][-1]
    assert notes.startswith("Saved notes.") and "kim drinks tea" in notes


def test_the_sessions_list_and_search_are_filtered_by_end_user(srv: Server, sim: Simulator) -> None:
    ids: dict[str, str] = {}
    for user in ("carol-l", "dave-l"):
        sim.reset()
        sim.script([{"reply": {"text": "hi"}}])
        ids[user] = _say(srv, f"{user} says listing", via=USER_HEADER, user=user).headers[
            "x-session-id"
        ]

    def listed(params: dict[str, str], **headers: str) -> httpx.Response:
        return httpx.get(
            f"{srv.base_url}/v1/sessions",
            params={"limit": "100", **params},
            headers=srv.headers(**headers),
        )

    carol = listed({"user": "carol-l"}).json()["data"]
    assert [s["id"] for s in carol] == [ids["carol-l"]] and carol[0]["user"] == "carol-l"
    everyone = {s["id"] for s in listed({}).json()["data"]}
    assert set(ids.values()) <= everyone
    # A request acting for an end user lists only that one's, and may not ask for another.
    own = listed({}, **{USER_HEADER: "dave-l"}).json()["data"]
    assert [s["id"] for s in own] == [ids["dave-l"]]
    own = listed({}, **{"X-Courier-End-User": "dave-l"}).json()["data"]
    assert [s["id"] for s in own] == [ids["dave-l"]]
    other = listed({"user": "carol-l"}, **{USER_HEADER: "dave-l"})
    assert other.status_code == 400 and other.json()["error"]["code"] == "end_user_mismatch"

    def searched(**headers: str) -> set[str]:
        resp = httpx.get(
            f"{srv.base_url}/v1/sessions/search",
            params={"q": "listing"},
            headers=srv.headers(**headers),
        )
        assert resp.status_code == 200, resp.text
        return {h["session_id"] for h in resp.json()["data"]}

    assert searched() >= set(ids.values())
    assert searched(**{USER_HEADER: "carol-l"}) == {ids["carol-l"]}

    # Naming another end user's session is answered as if it did not exist.
    sim.reset()
    sim.script([{"reply": {"text": "never"}}])
    resp = _chat(
        srv,
        [{"role": "user", "content": "let me in"}],
        headers={"X-Session-Id": ids["carol-l"], USER_HEADER: "dave-l"},
    )
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "session_not_found"
    assert not sim.requests()


def test_a_chat_header_continues_the_same_session(srv: Server, sim: Simulator) -> None:
    def ask(
        messages: list[dict[str, Any]], chat: str, user: str = "erin", key: str | None = None
    ) -> str:
        sim.reset()
        sim.script([{"reply": {"text": "hello"}}])
        resp = _chat(srv, messages, headers={USER_HEADER: user, CHAT_HEADER: chat}, key=key)
        assert resp.status_code == 200, resp.text
        return resp.headers["x-session-id"]

    hi = [{"role": "user", "content": "hi"}]
    first_a, first_b = ask(hi, "chat-a"), ask(hi, "chat-b")
    assert first_a != first_b
    # Open WebUI's title request carries the chat id too; it shares nothing with the chat,
    # so it gets a session of its own and the chat's name keeps pointing at the chat.
    title = ask([{"role": "user", "content": "### Task:\nGenerate a title"}], "chat-a")
    assert title != first_a
    # Both chats hold [hi, hello]: continuity alone would pick one; the name picks its own.
    more = [*hi, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    assert ask(more, "chat-a") == first_a
    assert ask(more, "chat-b") == first_b
    # Regenerating the first answer resends only the first message: still the same chat.
    assert ask(hi, "chat-a") == first_a
    messages = httpx.get(
        f"{srv.base_url}/v1/sessions/{first_a}/messages", headers=srv.headers()
    ).json()["data"]
    live = [(m["role"], m["content"]) for m in messages if m["state"] == "live"]
    assert live == [("user", "hi"), ("assistant", "hello")]
    # The same chat id from another end user, or another key, names nothing of erin's.
    assert ask(more, "chat-a", user="frank") not in (first_a, first_b)
    assert ask(more, "chat-a", key=ADMIN_KEY) not in (first_a, first_b)
    # A deleted session is gone for its name too: the chat starts afresh and is named anew.
    deleted = httpx.delete(f"{srv.base_url}/v1/sessions/{first_b}", headers=srv.headers())
    assert deleted.status_code == 200
    fresh = ask(hi, "chat-b")
    assert fresh != first_b and ask(more, "chat-b") == fresh


def test_a_bad_end_user_is_a_400(srv: Server, sim: Simulator) -> None:
    sim.reset()
    hi = [{"role": "user", "content": "hi"}]
    for headers, body, param in (
        ({"X-Courier-End-User": "x" * 300}, {}, "x-courier-end-user"),
        ({USER_HEADER: "y" * 300}, {}, USER_HEADER.lower()),
        ({}, {"user": "bell\x07"}, "user"),
        ({}, {"safety_identifier": "tab\tin"}, "safety_identifier"),
        ({CHAT_HEADER: "c" * 300}, {}, CHAT_HEADER.lower()),
    ):
        resp = _chat(srv, hi, headers=headers, **body)
        assert resp.status_code == 400, resp.text
        error = resp.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error"
    assert not sim.requests()


def test_responses_api_scopes_by_end_user(srv: Server, sim: Simulator) -> None:
    def respond(**body: Any) -> httpx.Response:
        sim.reset()
        sim.script([{"reply": {"text": "ok"}}])
        return httpx.post(
            f"{srv.base_url}/v1/responses",
            json={"model": "courier", "input": "hello", **body},
            headers=srv.headers(),
            timeout=60,
        )

    mine = respond(safety_identifier="gina-r")
    assert mine.status_code == 200, mine.text
    listed = httpx.get(
        f"{srv.base_url}/v1/sessions", params={"user": "gina-r"}, headers=srv.headers()
    ).json()["data"]
    assert [s["id"] for s in listed] == [mine.json()["session_id"]]
    # Another end user may not continue (or fork) gina's response.
    foreign = respond(user="hank-r", previous_response_id=mine.json()["id"])
    assert foreign.status_code == 404
    assert foreign.json()["error"]["param"] == "previous_response_id"
    again = respond(user="gina-r", previous_response_id=mine.json()["id"])
    assert again.status_code == 200 and again.json()["session_id"] == mine.json()["session_id"]


def test_the_end_user_spend_cap_refuses(sim: Simulator, servers: ServerFactory) -> None:
    server = servers(COURIER_SPEND_CAP_END_USER_USD="0.0000001")
    tool_turn = [
        {"reply": {"tool_calls": [_call("todo", action="list")]}},
        {"reply": {"text": "unreachable"}},
    ]
    sim.reset()
    sim.script(tool_turn[:1])
    first = _chat(server, [{"role": "user", "content": "x"}], user="ivan")
    assert first.status_code == 402, first.text  # the second call would pass the cap
    sim.reset()
    again = _chat(server, [{"role": "user", "content": "y"}], user="ivan")
    assert again.status_code == 402
    assert again.json()["error"]["code"] == "spend_limit_reached"
    assert "end user" in again.json()["error"]["message"]
    assert not sim.requests()  # refused before any upstream call
    # Another end user of the same key, and the key without one, still run.
    for body in ({"user": "judy"}, {}):
        sim.reset()
        sim.script([{"reply": {"text": "fine"}}])
        ok = _chat(server, [{"role": "user", "content": "z"}], **body)
        assert ok.status_code == 200, ok.text
