"""The sessions API over HTTP: paging, ownership, messages and their states, fork, retract
vs purge, search, and a cost report whose savings are checked by hand against the ledger."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

ADMIN_KEY = "admin-key-0123456789abcdef"
TOOL_THEN_TEXT = [
    {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
    {"reply": {"text": "Nothing to see."}},
]


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory) -> Server:
    """Anthropic wire (it reports cache writes and reads), with an admin key as well."""
    return module_servers("anthropic", COURIER_ADMIN_API_KEY=ADMIN_KEY)


def _h(srv: Server, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"} if admin else srv.headers()


def _chat(
    srv: Server, text: str, *, admin: bool = False, session: str | None = None
) -> httpx.Response:
    headers = _h(srv, admin)
    if session:
        headers["X-Session-Id"] = session
    resp = httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=30,
    )
    return resp


def _new_session(srv: Server, sim: Simulator, text: str, *, admin: bool = False) -> str:
    sim.script([{"reply": {"text": f"answer to {text}"}}])
    resp = _chat(srv, text, admin=admin)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-session-id"]


def _get(srv: Server, path: str, admin: bool = False, **params: Any) -> httpx.Response:
    return httpx.get(f"{srv.base_url}{path}", params=params, headers=_h(srv, admin), timeout=30)


def _ok(resp: httpx.Response) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _all_pages(srv: Server, path: str, admin: bool = False, **params: Any) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        page = _ok(_get(srv, path, admin, **params, **({"cursor": cursor} if cursor else {})))
        items += page["data"]
        if not page["has_more"]:
            assert page["next_cursor"] is None
            return items
        cursor = page["next_cursor"]
        assert cursor
    raise AssertionError("paging never ended")


def test_list_is_paged_newest_first(srv: Server, sim: Simulator) -> None:
    mine = [_new_session(srv, sim, f"paging question number {i}") for i in range(3)]
    first = _ok(_get(srv, "/v1/sessions", limit=2))
    assert first["object"] == "list" and len(first["data"]) == 2 and first["has_more"]
    listed = _all_pages(srv, "/v1/sessions", limit=2)
    ids = [s["id"] for s in listed]
    assert len(ids) == len(set(ids)), "a session appeared on two pages"
    assert [i for i in ids if i in mine] == list(reversed(mine))
    newest = next(s for s in listed if s["id"] == mine[-1])
    assert set(newest) >= {
        "id",
        "title",
        "profile",
        "created_at",
        "last_active_at",
        "turns",
        "cost_usd",
        "cache_savings_usd",
    }
    assert newest["title"] == "paging question number 2"
    assert newest["turns"] == 1 and newest["profile"] == "courier"
    assert Decimal(newest["cost_usd"]) > 0
    assert newest == _ok(_get(srv, f"/v1/sessions/{mine[-1]}"))


def test_title_is_truncated(srv: Server, sim: Simulator) -> None:
    sid = _new_session(srv, sim, "word " * 100)
    title = _ok(_get(srv, f"/v1/sessions/{sid}"))["title"]
    assert len(title) == 80 and title.endswith("…") and "  " not in title


def test_another_principal_gets_404_everywhere(srv: Server, sim: Simulator) -> None:
    theirs = _new_session(srv, sim, "admin private matter", admin=True)
    for path in ("", "/messages", "/cost", "/usage"):
        resp = _get(srv, f"/v1/sessions/{theirs}{path}")
        assert resp.status_code == 404, path
        assert resp.json()["error"]["code"] == "session_not_found"
    assert (
        httpx.post(f"{srv.base_url}/v1/sessions/{theirs}/fork", headers=srv.headers()).status_code
        == 404
    )
    assert (
        httpx.delete(f"{srv.base_url}/v1/sessions/{theirs}", headers=srv.headers()).status_code
        == 404
    )
    assert theirs not in [s["id"] for s in _all_pages(srv, "/v1/sessions", limit=100)]
    # Indistinguishable from a session that does not exist.
    missing = _get(srv, "/v1/sessions/sess_does_not_exist").json()["error"]
    foreign = _get(srv, f"/v1/sessions/{theirs}").json()["error"]
    assert missing == foreign | {"message": "session 'sess_does_not_exist' not found"}
    # The admin sees every principal's sessions.
    mine = _new_session(srv, sim, "ordinary matter")
    assert _ok(_get(srv, f"/v1/sessions/{mine}", admin=True))["id"] == mine
    assert {theirs, mine} <= {s["id"] for s in _all_pages(srv, "/v1/sessions", True, limit=100)}
    assert httpx.get(f"{srv.base_url}/v1/sessions").status_code == 401


def test_messages_paged_with_display_and_exact_text(srv: Server, sim: Simulator) -> None:
    sim.script(TOOL_THEN_TEXT)
    sid = _chat(srv, "what files are there?").headers["x-session-id"]
    first = _ok(_get(srv, f"/v1/sessions/{sid}/messages", limit=2))
    assert first["has_more"] and first["next_cursor"]
    rows = _all_pages(srv, f"/v1/sessions/{sid}/messages", limit=2)
    assert [r["role"] for r in rows] == ["user", "assistant", "tool", "assistant"]
    assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    user, call, result, answer = rows
    assert user["content"] == user["api_content"] == "what files are there?"
    assert call["tool_calls"][0]["name"] == "list_files" and call["content"] is None
    assert result["tool_call_id"] == call["tool_calls"][0]["id"]
    assert answer["content"] == "Nothing to see." and answer["tool_calls"] == []
    assert {r["state"] for r in rows} == {"live"}
    # A compaction archives rows and a pruned copy carries a model-facing text; both are
    # one flag flip and one sidecar in the log, made here directly on the real file.
    with sqlite3.connect(srv.data_dir / "courier.db") as db:
        db.execute("UPDATE message SET active = 0, compacted = 1 WHERE id = ?", (call["id"],))
        db.execute("UPDATE message SET api_content = 'pruned' WHERE id = ?", (result["id"],))
    again = _all_pages(srv, f"/v1/sessions/{sid}/messages")
    assert [r["state"] for r in again] == ["live", "archived", "live", "live"]
    assert again[2]["content"] != again[2]["api_content"] == "pruned"


def test_bad_paging_parameters_are_400(srv: Server) -> None:
    for params in ({"limit": 0}, {"limit": 101}, {"limit": "ten"}):
        resp = _get(srv, "/v1/sessions", **params)
        assert resp.status_code == 400
        assert resp.json()["error"]["param"] == "limit"
    assert _ok(_get(srv, "/v1/sessions", cursor="sess_nope")) == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
    }


def test_fork_from_a_message_with_its_own_workspace(srv: Server, sim: Simulator) -> None:
    sim.script(TOOL_THEN_TEXT)
    sid = _chat(srv, "list the files").headers["x-session-id"]
    source_ws = srv.data_dir / "workspaces" / sid
    (source_ws / "notes.txt").write_text("original")
    rows = _ok(_get(srv, f"/v1/sessions/{sid}/messages"))["data"]
    call = rows[1]
    resp = httpx.post(
        f"{srv.base_url}/v1/sessions/{sid}/fork",
        json={"message_id": call["id"]},
        headers=srv.headers(),
    )
    fork = _ok(resp)
    assert fork["id"] != sid and fork["messages"] == 2 and fork["workspace_copied"]
    assert fork["forked_from"] == {"session_id": sid, "message_id": call["id"]}
    assert fork["title"] == "list the files" and fork["turns"] == 0
    forked = _ok(_get(srv, f"/v1/sessions/{fork['id']}/messages"))["data"]
    assert [(r["role"], r["content"]) for r in forked] == [
        ("user", "list the files"),
        ("assistant", None),
    ]
    fork_ws = srv.data_dir / "workspaces" / fork["id"]
    assert (fork_ws / "notes.txt").read_text() == "original"
    (fork_ws / "notes.txt").write_text("changed in the fork")
    assert (source_ws / "notes.txt").read_text() == "original"
    # The fork continues on its own: the cut tool call is closed, the source is untouched.
    sim.script([{"expect": {"last_user_contains": "go on"}, "reply": {"text": "forked on"}}])
    cont = _chat(srv, "go on", session=fork["id"])
    assert cont.status_code == 200, cont.text
    upstream = json.loads(sim.requests()[-1]["body"])["messages"]
    shapes = [(m["role"], [b["type"] for b in m["content"]]) for m in upstream]
    assert shapes == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result", "text"]),
    ]
    assert len(_ok(_get(srv, f"/v1/sessions/{sid}/messages"))["data"]) == 4


def test_fork_refuses_a_foreign_or_missing_message(srv: Server, sim: Simulator) -> None:
    a = _new_session(srv, sim, "fork source a")
    b = _new_session(srv, sim, "fork source b")
    b_first = _ok(_get(srv, f"/v1/sessions/{b}/messages"))["data"][0]["id"]
    url = f"{srv.base_url}/v1/sessions/{a}/fork"
    for body in ({"message_id": b_first}, {"message_id": 10**9}):
        resp = httpx.post(url, json=body, headers=srv.headers())
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "message_id"
    for bad in ({"message_id": "1"}, {"message_id": -1}, [1]):
        resp = httpx.post(url, json=bad, headers=srv.headers())
        assert resp.status_code == 400
    resp = httpx.post(url, content=b"{nope", headers=srv.headers())
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    # Nested past the stdlib's recursion limit: a RecursionError, a 500, before the bounds.
    resp = httpx.post(url, content=b"[" * 8000 + b"]" * 8000, headers=srv.headers())
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "invalid_json"
    # No body forks the whole live session.
    whole = _ok(httpx.post(url, headers=srv.headers()))
    assert whole["messages"] == 2


def test_retract_hides_and_purge_deletes(srv: Server, sim: Simulator) -> None:
    sid = _new_session(srv, sim, "zanzibar retraction marker")
    assert _ok(_get(srv, "/v1/sessions/search", q="zanzibar"))["data"]
    # Purge needs the admin scope.
    refused = httpx.delete(f"{srv.base_url}/v1/sessions/{sid}?purge=true", headers=srv.headers())
    assert refused.status_code == 403
    gone = httpx.delete(f"{srv.base_url}/v1/sessions/{sid}", headers=srv.headers())
    assert _ok(gone) == {
        "id": sid,
        "object": "courier.session.deleted",
        "deleted": True,
        "purged": False,
    }
    assert _get(srv, f"/v1/sessions/{sid}").status_code == 404
    assert sid not in [s["id"] for s in _all_pages(srv, "/v1/sessions", limit=100)]
    assert not _ok(_get(srv, "/v1/sessions/search", q="zanzibar"))["data"]
    continued = _chat(srv, "still there?", session=sid)
    assert continued.status_code == 404
    # Nothing was deleted: the admin still sees every row, marked retracted.
    assert _ok(_get(srv, f"/v1/sessions/{sid}", admin=True))["state"] == "retracted"
    rows = _ok(_get(srv, f"/v1/sessions/{sid}/messages", admin=True))["data"]
    assert [r["state"] for r in rows] == ["retracted", "retracted"]
    assert rows[0]["content"] == "zanzibar retraction marker"
    # Retracted, it is gone for its owner, purge or not; the admin's purge deletes the
    # transcript and keeps the ledger.
    again = httpx.delete(f"{srv.base_url}/v1/sessions/{sid}?purge=true", headers=srv.headers())
    assert again.status_code == 404
    purged = httpx.delete(f"{srv.base_url}/v1/sessions/{sid}?purge=true", headers=_h(srv, True))
    assert _ok(purged)["purged"] is True
    assert _ok(_get(srv, f"/v1/sessions/{sid}/messages", admin=True))["data"] == []
    assert _ok(_get(srv, f"/v1/sessions/{sid}", admin=True))["state"] == "purged"
    ledger = _ok(_get(srv, f"/v1/sessions/{sid}/usage", admin=True))
    assert ledger["total_calls"] == 1
    with sqlite3.connect(srv.data_dir / "courier.db") as db:
        (left,) = db.execute("SELECT count(*) FROM message WHERE session_id = ?", (sid,)).fetchone()
        (prompt,) = db.execute("SELECT system_prompt FROM session WHERE id = ?", (sid,)).fetchone()
        hits = db.execute(
            "SELECT count(*) FROM message_fts WHERE message_fts MATCH 'zanzibar'"
        ).fetchone()
    assert left == 0 and prompt == "" and hits == (0,)


def test_search_finds_only_the_callers_sessions(srv: Server, sim: Simulator) -> None:
    mine = _new_session(srv, sim, "the quokka smiles at dawn")
    _new_session(srv, sim, "a quokka belongs to the admin", admin=True)
    found = _ok(_get(srv, "/v1/sessions/search", q="quokka"))["data"]
    assert [h["session_id"] for h in found] == [mine]
    assert found[0]["title"] == "the quokka smiles at dawn" and found[0]["role"] == "user"
    assert "**quokka**" in found[0]["snippet"]
    # FTS syntax is quoted, never interpreted; a query with no words is a clear 400.
    for hostile in ('quokka" OR "admin', "quokka*", "NEAR(quokka", "col:quokka"):
        assert _get(srv, "/v1/sessions/search", q=hostile).status_code == 200, hostile
    for empty in ("", '"" ***', "OR AND"):
        resp = _get(srv, "/v1/sessions/search", q=empty)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "q"


# Claude Sonnet 4.5 list prices under 200K prompt tokens, USD per million tokens.
RATES = {
    "input_tokens": Decimal(3),
    "output_tokens": Decimal(15),
    "cache_read_tokens": Decimal("0.30"),
    "cache_write_tokens": Decimal("3.75"),
}
MTOK = Decimal(1_000_000)


def test_cost_report_savings_by_hand(srv: Server, sim: Simulator) -> None:
    sim.configure(min_cacheable_tokens=64)
    try:
        sim.script(TOOL_THEN_TEXT)
        sid = _chat(srv, "look around").headers["x-session-id"]
    finally:
        sim.configure(min_cacheable_tokens=1024)
    calls = _ok(_get(srv, f"/v1/sessions/{sid}/usage"))["calls"]
    assert calls[0]["cache_write_tokens"] > 0 and calls[1]["cache_read_tokens"] > 0
    report = _ok(_get(srv, f"/v1/sessions/{sid}/cost"))
    for bucket, rate in RATES.items():
        tokens = sum(c[bucket] for c in calls)
        assert report["tokens"][bucket] == tokens
        assert Decimal(report["cost_by_bucket_usd"][bucket]) == tokens * rate / MTOK
    spent = sum(Decimal(c["cost_usd"]) for c in calls)
    assert Decimal(report["cost_usd"]) == spent
    assert sum(Decimal(v) for v in report["cost_by_bucket_usd"].values()) == spent
    # Without a cache every prompt token is fresh input.
    uncached = sum(
        (c["input_tokens"] + c["cache_read_tokens"] + c["cache_write_tokens"])
        * RATES["input_tokens"]
        / MTOK
        + c["output_tokens"] * RATES["output_tokens"] / MTOK
        for c in calls
    )
    assert Decimal(report["uncached_cost_usd"]) == uncached
    savings = sum(
        c["cache_read_tokens"] * (RATES["input_tokens"] - RATES["cache_read_tokens"]) / MTOK
        + c["cache_write_tokens"] * (RATES["input_tokens"] - RATES["cache_write_tokens"]) / MTOK
        for c in calls
    )
    assert Decimal(report["cache_savings_usd"]) == savings == uncached - spent
    summary = _ok(_get(srv, f"/v1/sessions/{sid}"))
    assert Decimal(summary["cache_savings_usd"]) == savings
    assert report["upstream_calls"] == 2 and report["unpriced_calls"] == 0


def _resend(srv: Server, history: list[dict[str, str]]) -> httpx.Response:
    return httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": history},
        headers=srv.headers(),
        timeout=30,
    )


def test_a_retracted_session_is_not_continued_by_resending_it(srv: Server, sim: Simulator) -> None:
    kept = _new_session(srv, sim, "the okapi question")
    gone = _new_session(srv, sim, "the axolotl question")
    sim.script([{"reply": {"text": "more okapi"}}, {"reply": {"text": "fresh start"}}])
    # Without a session id a client resends the visible history; Courier finds its session.
    okapi = [
        {"role": "user", "content": "the okapi question"},
        {"role": "assistant", "content": "answer to the okapi question"},
        {"role": "user", "content": "and then?"},
    ]
    assert _resend(srv, okapi).headers["x-session-id"] == kept
    assert httpx.delete(f"{srv.base_url}/v1/sessions/{gone}", headers=srv.headers()).is_success
    axolotl = [
        {"role": "user", "content": "the axolotl question"},
        {"role": "assistant", "content": "answer to the axolotl question"},
        {"role": "user", "content": "and then?"},
    ]
    resent = _resend(srv, axolotl)
    assert resent.status_code == 200 and resent.headers["x-session-id"] not in (gone, kept)


def test_fork_carries_the_images(srv: Server, sim: Simulator) -> None:
    pixel = (
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR4"
        "nGNgYAAAAAMAASsJTYQAAAAASUVORK5CYII="
    )
    sim.script([{"reply": {"text": "a pixel"}}])
    resp = httpx.post(
        f"{srv.base_url}/v1/chat/completions",
        json={
            "model": "courier",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": pixel}},
                    ],
                }
            ],
        },
        headers=srv.headers(),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    sid = resp.headers["x-session-id"]
    (user, _) = _ok(_get(srv, f"/v1/sessions/{sid}/messages"))["data"]
    assert len(user["images"]) == 1
    fork = _ok(httpx.post(f"{srv.base_url}/v1/sessions/{sid}/fork", headers=srv.headers()))
    sim.script([{"reply": {"text": "still a pixel"}}])
    cont = _chat(srv, "and now?", session=fork["id"])
    assert cont.status_code == 200, cont.text
    blocks = json.loads(sim.requests()[-1]["body"])["messages"][0]["content"]
    assert sorted(b["type"] for b in blocks) == ["image", "text"]
