"""Every session-scoped route is in the bindings table, and every id in its path is resolved
by one of the resolvers (the 404 table itself runs against a real server in tests/e2e/)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from app.api.http import owned
from app.config import load_settings
from app.main import create_app


@dataclass(frozen=True)
class Ids:
    """One session's resources, by id."""

    session: str
    response: str
    approval: str
    grant: str


Send = Callable[[httpx.Client, Ids], httpx.Response]


@dataclass(frozen=True)
class Case:
    """One way a route names a session: S1's id answers 404, S2's answers `own`."""

    name: str
    send: Send
    own: int = 200
    key_own: int | None = None
    """What a key (not a token) gets for S2's own, where it differs from `own`."""
    phase: str = "read"
    """When S2's own check runs: `read` while a turn of S2 waits on its approval, `decide`
    to answer that approval, `idle` once the turn is over, `last` to delete S2's parts and
    `end` to delete S2 itself."""


@dataclass(frozen=True)
class Listing:
    """A list the bound token gets filtered: none of S1's ids appears, S2's `shown` does."""

    name: str
    send: Send
    shown: Callable[[Ids], str | None]


def _events(c: httpx.Client, i: Ids) -> httpx.Response:
    # The status only: S2's turn may still be running, and following it would wait.
    with c.stream("GET", f"/v1/sessions/{i.session}/events") as resp:
        body = resp.read() if resp.status_code != 200 else b""
        return httpx.Response(resp.status_code, headers=resp.headers, content=body)


def _chat(c: httpx.Client, text: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    payload = {"model": "courier", "messages": [{"role": "user", "content": text}], **body}
    return c.post("/v1/chat/completions", json=payload, headers=headers)


def _daily_usage(c: httpx.Client, _i: Ids) -> httpx.Response:
    return c.get("/v1/usage")


ROUTES: dict[tuple[str, str], list[Case | Listing]] = {
    ("GET", "/v1/sessions/{session_id}"): [
        Case("get session", lambda c, i: c.get(f"/v1/sessions/{i.session}"))
    ],
    ("GET", "/v1/sessions/{session_id}/messages"): [
        Case("messages", lambda c, i: c.get(f"/v1/sessions/{i.session}/messages"))
    ],
    ("GET", "/v1/sessions/{session_id}/cost"): [
        Case("cost", lambda c, i: c.get(f"/v1/sessions/{i.session}/cost"))
    ],
    ("GET", "/v1/sessions/{session_id}/usage"): [
        Case("session usage", lambda c, i: c.get(f"/v1/sessions/{i.session}/usage"))
    ],
    ("GET", "/v1/sessions/{session_id}/turns"): [
        Case("turns", lambda c, i: c.get(f"/v1/sessions/{i.session}/turns"))
    ],
    ("GET", "/v1/sessions/{session_id}/events"): [Case("events", _events)],
    ("POST", "/v1/sessions/{session_id}/stop"): [
        Case("stop", lambda c, i: c.post(f"/v1/sessions/{i.session}/stop"), phase="idle")
    ],
    ("POST", "/v1/sessions/{session_id}/fork"): [
        Case("fork", lambda c, i: c.post(f"/v1/sessions/{i.session}/fork"), phase="idle")
    ],
    ("DELETE", "/v1/sessions/{session_id}"): [
        Case("delete session", lambda c, i: c.delete(f"/v1/sessions/{i.session}"), phase="end")
    ],
    ("GET", "/v1/responses/{response_id}"): [
        Case("get response", lambda c, i: c.get(f"/v1/responses/{i.response}"))
    ],
    ("GET", "/v1/responses/{response_id}/input_items"): [
        Case("input items", lambda c, i: c.get(f"/v1/responses/{i.response}/input_items"))
    ],
    ("DELETE", "/v1/responses/{response_id}"): [
        Case("delete response", lambda c, i: c.delete(f"/v1/responses/{i.response}"), phase="last")
    ],
    ("GET", "/v1/approvals/{approval_id}"): [
        Case("get approval", lambda c, i: c.get(f"/v1/approvals/{i.approval}"))
    ],
    ("POST", "/v1/approvals/{approval_id}"): [
        Case(
            "decide",
            lambda c, i: c.post(f"/v1/approvals/{i.approval}", json={"decision": "deny"}),
            phase="decide",
        )
    ],
    ("DELETE", "/v1/approvals/grants/{grant_id}"): [
        Case("revoke grant", lambda c, i: c.delete(f"/v1/approvals/grants/{i.grant}"), phase="last")
    ],
    ("POST", "/v1/chat/completions"): [
        Case(
            "chat X-Session-Id",
            lambda c, i: _chat(c, "by header", {"X-Session-Id": i.session}),
            phase="idle",
        ),
        Case(
            "chat body session_id",
            lambda c, i: _chat(c, "by body", {}, session_id=i.session),
            phase="idle",
        ),
        Case(
            "chat retry naming the session",
            lambda c, i: _chat(
                c,
                "a retry",
                {"X-Session-Id": i.session, "x-stainless-retry-count": "1", "Idempotency-Key": "k"},
            ),
            phase="idle",
        ),
    ],
    ("POST", "/v1/responses"): [
        Case(
            "responses previous_response_id",
            lambda c, i: c.post(
                "/v1/responses",
                json={"model": "courier", "input": "go on", "previous_response_id": i.response},
            ),
            phase="idle",
        )
    ],
    ("POST", "/v1/tokens"): [
        # A token never mints (403), but naming a session it cannot see is a 404 first.
        Case(
            "mint",
            lambda c, i: c.post("/v1/tokens", json={"session_id": i.session}),
            own=403,
            key_own=200,
        )
    ],
    ("GET", "/v1/sessions"): [
        Listing("sessions list", lambda c, i: c.get("/v1/sessions"), lambda i: i.session)
    ],
    ("GET", "/v1/sessions/search"): [
        Listing(
            "search",
            lambda c, i: c.get("/v1/sessions/search", params={"q": "hello"}),
            lambda i: i.session,
        )
    ],
    ("GET", "/v1/approvals"): [
        Listing("approvals list", lambda c, i: c.get("/v1/approvals"), lambda i: i.approval)
    ],
    ("GET", "/v1/approvals/grants"): [
        Listing("grants list", lambda c, i: c.get("/v1/approvals/grants"), lambda i: i.grant),
        Listing(
            "grants of a named session",
            lambda c, i: c.get("/v1/approvals/grants", params={"session_id": i.session}),
            lambda i: i.grant,
        ),
    ],
    # The key's spend per day: a bound token sees its session's calls only (checked by count).
    ("GET", "/v1/usage"): [Listing("usage", _daily_usage, lambda i: None)],
}
UNSCOPED: dict[tuple[str, str], str] = {
    ("GET", "/health"): "liveness, no principal",
    ("GET", "/health/ready"): "readiness, no principal",
    ("GET", "/v1/models"): "the configured profiles, the same for every session",
    ("GET", "/v1/models/{model_id:path}"): "a profile by name, not a session's",
    ("GET", "/v1/capabilities"): "what the server offers, the same for every session",
    ("GET", "/openapi.json"): "the API's description (admin)",
    ("GET", "/metrics"): "process-wide counters (metrics scope)",
    ("GET", "/console"): "the console's static page",
    ("GET", "/console/"): "the console's static page",
    ("GET", "/console/{name}"): "the console's static files, by file name",
}
RESOLVERS = {
    owned.chat_session,
    owned.read_session,
    owned.read_summary,
    owned.reachable_response,
    owned.reachable_approval,
    owned.reachable_grant,
}
"""The dependencies that resolve an id for the principal (app/api/http/owned.py)."""


def _registered() -> dict[tuple[str, str], Any]:
    settings = load_settings(
        api_key="k" * 8 + "0123456789abcdef", upstream_base_url="http://127.0.0.1:9/v1"
    )
    app = create_app(settings)
    found: dict[tuple[str, str], Any] = {}
    for context in iter_route_contexts(app.routes):
        for method in context.methods or ():
            if method != "HEAD":
                found[(method, str(context.path))] = context.original_route
    return found


def test_every_route_is_in_the_table() -> None:
    registered = set(_registered())
    unlisted = registered - set(ROUTES) - set(UNSCOPED)
    assert not unlisted, f"routes with no binding case (add them to ROUTES or UNSCOPED): {unlisted}"
    stale = (set(ROUTES) | set(UNSCOPED)) - registered
    assert not stale, f"table entries for routes the app no longer has: {stale}"


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_id_in_a_path_is_resolved_by_one_of_the_resolvers() -> None:
    """The check written once: a route that took an id from its path and looked it up
    itself would be the route that forgets the binding."""
    for (method, path), route in _registered().items():
        if "{" not in path or (method, path) in UNSCOPED:
            continue
        assert isinstance(route, APIRoute), path
        assert RESOLVERS & set(_calls(route.dependant)), f"{method} {path} resolves its own id"
