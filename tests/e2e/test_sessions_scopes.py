"""The sessions and Responses APIs under scopes and session-bound tokens: a token bound to
one session sees and continues only that session; reading needs `sessions:read`, forking
and retracting need `chat`."""

from __future__ import annotations

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

SECRET = "token-secret-" + "y" * 40


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory) -> Server:
    return module_servers(COURIER_TOKENS_ENABLED="true", COURIER_TOKEN_SECRET=SECRET)


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _respond(
    srv: Server, sim: Simulator, headers: dict[str, str], **body: object
) -> httpx.Response:
    sim.script([{"reply": {"text": "ok"}}])
    return httpx.post(
        f"{srv.base_url}/v1/responses",
        json={"model": "courier", "input": "hello there", **body},
        headers=headers,
        timeout=30,
    )


def _mint(srv: Server, **body: object) -> str:
    resp = httpx.post(f"{srv.base_url}/v1/tokens", json=body, headers=srv.headers())
    assert resp.status_code == 200, resp.text
    token: str = resp.json()["token"]
    return token


def test_a_bound_token_sees_and_continues_only_its_session(srv: Server, sim: Simulator) -> None:
    mine = _respond(srv, sim, srv.headers()).json()
    other = _respond(srv, sim, srv.headers()).json()
    token = _mint(srv, scopes=["chat", "sessions:read"], session_id=mine["session_id"])
    base = srv.base_url
    listed = httpx.get(f"{base}/v1/sessions", headers=_h(token)).json()["data"]
    assert [s["id"] for s in listed] == [mine["session_id"]]
    assert (
        httpx.get(f"{base}/v1/sessions/{other['session_id']}", headers=_h(token)).status_code == 404
    )
    found = httpx.get(f"{base}/v1/sessions/search", params={"q": "hello"}, headers=_h(token))
    assert {h["session_id"] for h in found.json()["data"]} == {mine["session_id"]}
    assert httpx.get(f"{base}/v1/responses/{other['id']}", headers=_h(token)).status_code == 404
    # A new response would start another session: refused; continuing its own works.
    fresh = _respond(srv, sim, _h(token))
    assert fresh.status_code == 403 and fresh.json()["error"]["code"] == "token_session_mismatch"
    cont = _respond(srv, sim, _h(token), previous_response_id=mine["id"])
    assert cont.status_code == 200, cont.text
    assert cont.json()["session_id"] == mine["session_id"]
    foreign = _respond(srv, sim, _h(token), previous_response_id=other["id"])
    assert foreign.status_code == 404


def test_a_bound_token_continuing_an_older_response_is_refused_before_any_fork(
    srv: Server, sim: Simulator
) -> None:
    first = _respond(srv, sim, srv.headers()).json()
    _respond(srv, sim, srv.headers(), previous_response_id=first["id"])  # now the newest
    token = _mint(srv, scopes=["chat"], session_id=first["session_id"])
    listed = f"{srv.base_url}/v1/sessions?limit=100"
    before = len(httpx.get(listed, headers=srv.headers()).json()["data"])
    # Continuing an older response forks the session: a session this token may not use.
    older = _respond(srv, sim, _h(token), previous_response_id=first["id"])
    assert older.status_code == 403 and older.json()["error"]["code"] == "token_session_mismatch"
    assert len(httpx.get(listed, headers=srv.headers()).json()["data"]) == before


def test_reading_and_writing_need_their_scopes(srv: Server, sim: Simulator) -> None:
    sid = _respond(srv, sim, srv.headers()).json()["session_id"]
    reader = _mint(srv, scopes=["sessions:read"], session_id=sid)
    base = srv.base_url
    assert httpx.get(f"{base}/v1/sessions/{sid}/messages", headers=_h(reader)).status_code == 200
    assert httpx.post(f"{base}/v1/sessions/{sid}/fork", headers=_h(reader)).status_code == 403
    assert httpx.delete(f"{base}/v1/sessions/{sid}", headers=_h(reader)).status_code == 403
    chatter = _mint(srv, scopes=["chat"], session_id=sid)
    assert httpx.get(f"{base}/v1/sessions/{sid}", headers=_h(chatter)).status_code == 403


@pytest.mark.parametrize(
    "body",
    [b"[" * 8000 + b"]" * 8000, b'{"ttl_s": ' + b"9" * 5000 + b"}", b"{nope", b'"scopes"'],
    ids=["nested-8000-deep", "5000-digit-integer", "broken", "not-an-object"],
)
def test_a_mint_request_that_is_not_a_bounded_json_object_is_a_400(
    srv: Server, body: bytes
) -> None:
    resp = httpx.post(f"{srv.base_url}/v1/tokens", content=body, headers=srv.headers())
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "invalid_json"
