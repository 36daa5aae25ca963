"""The table of session-scoped routes, one case per way a route names a session: the
in-process tier checks it names every route the app registers (tests/unit/test_bindings.py),
the end-to-end tier sends every case to a real server (tests/e2e/test_bindings.py). One
table, so a route added for the first check is sent by the second."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx


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


def events(c: httpx.Client, i: Ids) -> httpx.Response:
    # The status only: S2's turn may still be running, and following it would wait.
    with c.stream("GET", f"/v1/sessions/{i.session}/events") as resp:
        body = resp.read() if resp.status_code != 200 else b""
        return httpx.Response(resp.status_code, headers=resp.headers, content=body)


def chat(c: httpx.Client, text: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    payload = {"model": "courier", "messages": [{"role": "user", "content": text}], **body}
    return c.post("/v1/chat/completions", json=payload, headers=headers)


def daily_usage(c: httpx.Client, _i: Ids) -> httpx.Response:
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
    ("GET", "/v1/sessions/{session_id}/events"): [Case("events", events)],
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
    # S2's response is a foreground one: its owner may not cancel it (400), others see none.
    ("POST", "/v1/responses/{response_id}/cancel"): [
        Case("cancel response", lambda c, i: c.post(f"/v1/responses/{i.response}/cancel"), own=400)
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
            lambda c, i: chat(c, "by header", {"X-Session-Id": i.session}),
            phase="idle",
        ),
        Case(
            "chat body session_id",
            lambda c, i: chat(c, "by body", {}, session_id=i.session),
            phase="idle",
        ),
        Case(
            "chat retry naming the session",
            lambda c, i: chat(
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
    ("GET", "/v1/usage"): [Listing("usage", daily_usage, lambda i: None)],
}
