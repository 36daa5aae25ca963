"""The Responses API over HTTP with the strict official SDK; every body and event is checked
against the spec. Three turns by `previous_response_id` on the Anthropic wire: a server
tool in turn 1 and a cache read in turn 3."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import httpx
import pytest
from openai import NotFoundError, OpenAI

from tests.support.responses import check_events, stream_events
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.spec import validate

ADMIN_KEY = "admin-key-0123456789abcdef"


@pytest.fixture(scope="module")
def claude(module_servers: ServerFactory) -> Server:
    return module_servers("anthropic", COURIER_ADMIN_API_KEY=ADMIN_KEY)


def _sdk(server: Server, key: str | None = None) -> OpenAI:
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=key or server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )


def _post(server: Server, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or server.api_key}"}
    return httpx.post(f"{server.base_url}/v1/responses", json=body, headers=headers, timeout=60)


def _rows(server: Server, session_id: str) -> list[tuple[str, int, int]]:
    with sqlite3.connect(server.data_dir / "courier.db") as db:
        return db.execute(
            "SELECT role, active, compacted FROM message WHERE session_id = ? ORDER BY id",
            (session_id,),
        ).fetchall()


def test_create_non_stream_strict_and_spec_valid(claude: Server, sim: Simulator) -> None:
    sim.script([{"expect": {"system_contains": "Be terse."}, "reply": {"text": "Hi there."}}])
    raw = _sdk(claude).responses.with_raw_response.create(
        model="courier", input="hello", instructions="Be terse.", metadata={"k": "v"}
    )
    body = raw.http_response.json()
    validate("Response", body)
    response = raw.parse()
    assert response.status == "completed" and response.output_text == "Hi there."
    assert response.metadata == {"k": "v"} and response.instructions == "Be terse."
    usage = body["usage"]
    courier = usage["courier"]
    assert usage["input_tokens"] == (
        courier["input_tokens"] + courier["cache_read_tokens"] + courier["cache_write_tokens"]
    )
    assert usage["input_tokens_details"]["cached_tokens"] == courier["cache_read_tokens"]
    assert usage["output_tokens"] == courier["output_tokens"] > 0
    assert courier["cost"]["status"] == "estimated" and usage["cost"] > 0
    assert raw.http_response.headers["x-session-id"] == body["session_id"]
    assert "x-courier-ignored" not in raw.http_response.headers
    sim.script([{"reply": {"text": "ok"}}])
    extra = _post(claude, {"model": "courier", "input": "x", "include": [], "zzz_unknown": 1})
    assert extra.status_code == 200
    assert extra.headers["x-courier-ignored"] == "include, zzz_unknown"
    # GET answers with the same object; the SDK's retrieve is strict too.
    again = httpx.get(f"{claude.base_url}/v1/responses/{response.id}", headers=claude.headers())
    assert again.json() == body
    assert _sdk(claude).responses.retrieve(response.id).output_text == "Hi there."


def test_stream_event_sequence_is_spec_valid(claude: Server, sim: Simulator) -> None:
    sim.configure(tokens_per_second=50)  # paced, so the deltas arrive apart
    sim.script([{"reply": {"text": "one two three four"}}])
    resp, events = stream_events(
        claude.base_url, {"model": "courier", "input": "count"}, claude.headers()
    )
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    check_events(events)
    kinds = [e["type"] for e in events]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert len(deltas) > 1 and "".join(deltas) == "one two three four"
    final = events[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == "one two three four"
    assert final["output"][0]["id"] == events[2]["item"]["id"] == events[4]["item_id"]
    assert final["usage"]["output_tokens"] > 0
    stored = httpx.get(f"{claude.base_url}/v1/responses/{final['id']}", headers=claude.headers())
    assert stored.json() == final


def test_sdk_stream_helper_accumulates(claude: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "streamed through the helper"}}])
    with _sdk(claude).responses.stream(model="courier", input="go") as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "streamed through the helper"
    assert types[0] == "response.created" and types[-1] == "response.completed"
    sim.script([{"reply": {"text": "via create(stream=True)"}}])
    chunks = list(_sdk(claude).responses.create(model="courier", input="go", stream=True))
    assert [c.sequence_number for c in chunks] == list(range(len(chunks)))


def test_three_turns_with_a_server_tool_then_a_cache_read(claude: Server, sim: Simulator) -> None:
    client = _sdk(claude)
    sim.configure(min_cacheable_tokens=64)
    try:
        sim.script(
            [
                {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
                {"expect": {"last_tool_result_contains": ""}, "reply": {"text": "It is empty."}},
            ]
        )
        first = client.responses.create(model="courier", input="what is in the workspace?")
        sim.script([{"expect": {"last_user_contains": "why"}, "reply": {"text": "New session."}}])
        second = client.responses.create(
            model="courier", input="why is it empty?", previous_response_id=first.id
        )
        sim.script([{"expect": {"last_user_contains": "thanks"}, "reply": {"text": "Welcome."}}])
        raw = client.responses.with_raw_response.create(
            model="courier", input="thanks", previous_response_id=second.id
        )
    finally:
        sim.configure(min_cacheable_tokens=1024)
    third = raw.parse()
    validate("Response", raw.http_response.json())
    sim.assert_script_done()
    # The server tool ran server-side: the client sees only the answer, never a call.
    assert [item.type for item in first.output] == ["message"]
    assert first.output_text == "It is empty." and first.usage is not None
    assert first.to_dict()["usage"]["courier"]["upstream_calls"] == 2
    sessions = {r.to_dict()["session_id"] for r in (first, second, third)}
    assert len(sessions) == 1
    assert third.previous_response_id == second.id and third.output_text == "Welcome."
    assert third.usage is not None and third.usage.input_tokens_details.cached_tokens > 0
    # Turn 3's upstream request carries the whole session, tool round trip included.
    body = json.loads(sim.requests()[-1]["body"])
    texts = json.dumps(body["messages"])
    for said in ("what is in the workspace?", "It is empty.", "why is it empty?", "thanks"):
        assert said in texts
    assert "tool_use" in texts and "tool_result" in texts
    items = client.responses.input_items.list(third.id)
    assert [(i.type, i.role) for i in items.data] == [("message", "user")]  # type: ignore[union-attr]


def test_continuing_an_older_response_forks(claude: Server, sim: Simulator) -> None:
    client = _sdk(claude)
    sim.script([{"reply": {"text": "A"}}, {"reply": {"text": "B"}}, {"reply": {"text": "C"}}])
    first = client.responses.create(model="courier", input="start")
    second = client.responses.create(
        model="courier", input="branch one", previous_response_id=first.id
    )
    other = client.responses.create(
        model="courier", input="branch two", previous_response_id=first.id
    )
    sid = {r.id: r.to_dict()["session_id"] for r in (first, second, other)}
    assert sid[first.id] == sid[second.id] != sid[other.id]
    upstream = json.dumps(json.loads(sim.requests()[-1]["body"])["messages"])
    assert "start" in upstream and "branch two" in upstream and "branch one" not in upstream


def test_delete_retracts_from_the_live_view(claude: Server, sim: Simulator) -> None:
    client = _sdk(claude)
    sim.script(
        [{"reply": {"text": "kept"}}, {"reply": {"text": "regret"}}, {"reply": {"text": "ok"}}]
    )
    first = client.responses.create(model="courier", input="keep this")
    second = client.responses.create(
        model="courier", input="forget this", previous_response_id=first.id
    )
    session = first.to_dict()["session_id"]
    client.responses.delete(second.id)
    with pytest.raises(NotFoundError):
        client.responses.retrieve(second.id)
    assert _rows(claude, session) == [
        ("user", 1, 0),
        ("assistant", 1, 0),
        ("user", 0, 0),
        ("assistant", 0, 0),
    ]
    # The continuity index forgets the deleted exchange: a client resending it cannot
    # continue the session past rows it no longer holds.
    with sqlite3.connect(claude.data_dir / "courier.db") as db:
        positions = db.execute(
            "SELECT position FROM transcript_key WHERE session_id = ? ORDER BY position",
            (session,),
        ).fetchall()
        length = db.execute("SELECT transcript_len FROM session WHERE id = ?", (session,))
        assert positions == [(1,), (2,)] and length.fetchone() == (2,)
    client.responses.create(model="courier", input="next", previous_response_id=first.id)
    upstream = json.dumps(json.loads(sim.requests()[-1]["body"])["messages"])
    assert "keep this" in upstream and "forget this" not in upstream and "regret" not in upstream


def test_store_false_resending_a_stored_conversation_deletes_only_its_own_exchange(
    claude: Server, sim: Simulator
) -> None:
    # A stateless client resends a stored conversation with store:false: continuity places
    # it on that session, and forgetting "this exchange" must not purge the whole session.
    sim.script([{"reply": {"text": "kept answer"}}, {"reply": {"text": "ephemeral answer"}}])
    kept = _post(claude, {"model": "courier", "input": "a conversation worth keeping"}).json()
    history = [
        {"role": "user", "content": "a conversation worth keeping"},
        {"role": "assistant", "content": "kept answer"},
        {"role": "user", "content": "an aside not to keep"},
    ]
    resp = _post(claude, {"model": "courier", "input": history, "store": False})
    assert resp.status_code == 200, resp.text
    assert resp.json()["session_id"] == kept["session_id"]  # continued, not a new session
    assert _rows(claude, kept["session_id"]) == [("user", 1, 0), ("assistant", 1, 0)]
    again = httpx.get(f"{claude.base_url}/v1/responses/{kept['id']}", headers=claude.headers())
    assert again.status_code == 200 and again.json()["output"][0]["content"][0]["text"] == (
        "kept answer"
    )


def test_store_false_keeps_only_the_ledger(claude: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "ephemeral"}}])
    resp = _post(claude, {"model": "courier", "input": "secret stuff", "store": False})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    validate("Response", body)
    assert body["store"] is False and "x-session-id" not in resp.headers
    assert (
        httpx.get(
            f"{claude.base_url}/v1/responses/{body['id']}", headers=claude.headers()
        ).status_code
        == 404
    )
    session = body["session_id"]
    assert _rows(claude, session) == []
    with sqlite3.connect(claude.data_dir / "courier.db") as db:
        calls = db.execute("SELECT count(*) FROM api_call WHERE session_id = ?", (session,))
        assert calls.fetchone() == (1,)
        found = db.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH 'secret'")
        assert found.fetchone() == (0,)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"background": True, "store": False}, "store"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": []}, "input"),
        ({"input": None}, "input"),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"model": ""}, "model"),
        ({"previous_response_id": "resp_nope"}, "previous_response_id"),
    ],
)
def test_bad_requests_name_the_param(claude: Server, body: dict[str, Any], param: str) -> None:
    resp = _post(claude, {"model": "courier", "input": "hi", **body})
    assert resp.status_code in (400, 404), resp.text
    validate("ErrorResponse", resp.json())
    assert resp.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b'{"model": "courier", "input": "hi", "seed": ' + b"9" * 5000 + b"}", "invalid_json"),
        (
            b'{"model": "courier", "input": "hi", "metadata": ' + b"[" * 80 + b"]" * 80 + b"}",
            "nested_too_deeply",
        ),
    ],
    ids=["5000-digit-integer", "nested-80-deep"],
)
def test_a_body_past_the_parse_bounds_is_a_400(claude: Server, body: bytes, code: str) -> None:
    """The chat route's bounds hold here too: Python's integer-string limit was an uncaught
    ValueError (a 500), and nesting was unbounded."""
    resp = httpx.post(
        f"{claude.base_url}/v1/responses", content=body, headers=claude.headers(), timeout=10
    )
    assert resp.status_code == 400, resp.text
    validate("ErrorResponse", resp.json())
    assert resp.json()["error"]["code"] == code


def test_bad_json_and_other_principals(claude: Server, sim: Simulator) -> None:
    bad = httpx.post(
        f"{claude.base_url}/v1/responses", content=b"{", headers=claude.headers(), timeout=10
    )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    assert httpx.post(f"{claude.base_url}/v1/responses", json={}).status_code == 401
    sim.script([{"reply": {"text": "admin only"}}])
    theirs = _post(claude, {"model": "courier", "input": "mine"}, key=ADMIN_KEY).json()["id"]
    for method, path in (
        ("GET", f"/v1/responses/{theirs}"),
        ("DELETE", f"/v1/responses/{theirs}"),
        ("GET", f"/v1/responses/{theirs}/input_items"),
    ):
        resp = httpx.request(method, f"{claude.base_url}{path}", headers=claude.headers())
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "response_not_found"
    cont = _post(claude, {"model": "courier", "input": "x", "previous_response_id": theirs})
    assert cont.status_code == 404 and cont.json()["error"]["param"] == "previous_response_id"


def test_input_items_are_paged(claude: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "done"}}])
    items = [{"role": "user", "content": f"part {i}"} for i in range(5)]
    resp = _post(claude, {"model": "courier", "input": items})
    rid = resp.json()["id"]
    url = f"{claude.base_url}/v1/responses/{rid}/input_items"
    page = httpx.get(url, params={"limit": 2, "order": "asc"}, headers=claude.headers()).json()
    validate("ResponseItemList", page)
    assert page["has_more"] and [i["content"][0]["text"] for i in page["data"]] == [
        "part 0",
        "part 1",
    ]
    rest = httpx.get(
        url,
        params={"limit": 10, "order": "asc", "after": page["last_id"]},
        headers=claude.headers(),
    ).json()
    assert not rest["has_more"] and len(rest["data"]) == 3
    listed = [i.id for i in _sdk(claude).responses.input_items.list(rid, limit=2)]
    assert len(listed) == 5  # the SDK's pager follows has_more / last_id


def test_a_retry_gets_the_same_response(claude: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "only once"}}])
    body = {"model": "courier", "input": "do it once"}
    first = _post(claude, body).json()
    retried = httpx.post(
        f"{claude.base_url}/v1/responses",
        json=body,
        headers={**claude.headers(), "x-stainless-retry-count": "1"},
        timeout=30,
    ).json()
    assert retried["id"] == first["id"] and retried["output"] == first["output"]
    keyed = {**claude.headers(), "Idempotency-Key": "k-resp-1"}
    sim.script([{"reply": {"text": "keyed once"}}])
    a = httpx.post(f"{claude.base_url}/v1/responses", json=body, headers=keyed, timeout=30)
    b = httpx.post(f"{claude.base_url}/v1/responses", json=body, headers=keyed, timeout=30)
    assert a.json()["id"] == b.json()["id"]
    sim.assert_script_done()  # two upstream calls in all, not four
