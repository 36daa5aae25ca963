"""The console in a real browser: Debian's chromium, headless, driven by Playwright, against a
live server with seeded sessions. Every view is screenshotted under test-output/console/
(or $COURIER_TEST_OUTPUT/console) for a person to look at.

Views whose API this server does not offer yet (sessions API, approvals) are skipped with
that reason rather than faked.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.paths import REPO
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "chromium is not installed: `make browser-test` installs it", allow_module_level=True
    )
sync_api = pytest.importorskip("playwright.sync_api")

LAUNCH_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OUTPUT = Path(os.environ.get("COURIER_TEST_OUTPUT", REPO / "test-output"))
SHOTS = OUTPUT / "console"
WIPE = "cd junk && rm -rf *"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-ws")


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, workspace: Path) -> Server:
    return module_servers(COURIER_WORKSPACE=str(workspace), COURIER_APPROVAL_TIMEOUT_S="60")


def chat(server: Server, text: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers=server.headers(),
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        timeout=90,
    )


@pytest.fixture(scope="module")
def seeded(server: Server, simulator: Simulator) -> dict[str, str]:
    """Two sessions: one with a file-writing tool call, one plain."""
    simulator.reset()
    simulator.script(
        [
            {"reply": {"tool_calls": [{"name": "write_file", "arguments": {
                "path": "pelicans.md", "content": "Pelicans hold 11 litres in the pouch."}}]}},
            {"reply": {"text": "I wrote the pelican facts to pelicans.md."}},
            {"reply": {"text": "Herons stand still for minutes while they hunt."}},
        ]
    )  # fmt: skip
    first = chat(server, "Write down what you know about pelicans")
    second = chat(server, "Tell me about herons")
    assert first.status_code == second.status_code == 200, first.text + second.text
    simulator.assert_script_done()
    return {"tools": first.headers["x-session-id"], "plain": second.headers["x-session-id"]}


def api(server: Server, path: str) -> httpx.Response:
    return httpx.get(f"{server.base_url}{path}", headers=server.headers(), timeout=30)


def require(server: Server, path: str) -> Any:
    response = api(server, path)
    if response.status_code == 404 and response.json()["error"].get("code") == "not_found":
        pytest.skip(f"this server has no {path.split('?')[0]} route yet")
    assert response.status_code == 200, response.text
    return response.json()


def usd(value: str | None) -> str:
    """What the console prints for a USD amount (console.js `usd`)."""
    if value is None:
        return "unknown"
    n = Decimal(value)
    return f"${n:.6f}" if 0 < n < Decimal("0.01") else f"${n:.4f}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # Refused requests (a wrong key's 401) log "Failed to load resource": expected, not a bug.
    pg.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith("Failed to load resource")
            else None
        ),
    )
    pg.errors = errors
    yield pg
    context.close()


def sign_in(page: Any, server: Server) -> None:
    page.goto(f"{server.base_url}/console/")
    page.get_by_label("Key or token").fill(server.api_key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("navigation", name="Views").wait_for()


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


# -- tests -----------------------------------------------------------------------------------


def test_the_console_is_served_with_a_restrictive_csp(server: Server) -> None:
    redirect = httpx.get(f"{server.base_url}/console", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "/console/"
    index = httpx.get(f"{server.base_url}/console/")
    csp = index.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert "<script" in index.text and "onclick" not in index.text  # no inline handlers
    for hostile in ("../__init__.py", "..%2F__init__.py", "router.py", "index.html"):
        assert httpx.get(f"{server.base_url}/console/{hostile}").status_code == 404, hostile


def test_sign_in_refuses_a_wrong_key_and_keeps_the_right_one_in_memory(
    page: Any, server: Server
) -> None:
    page.goto(f"{server.base_url}/console/")
    shot(page, "01-sign-in")
    page.get_by_label("Key or token").fill("not-the-key-at-all-000")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text("That key or token was refused.").wait_for()
    shot(page, "02-sign-in-refused")
    sign_in(page, server)
    stored = page.evaluate(
        "() => JSON.stringify([{...localStorage}, {...sessionStorage}, document.cookie,"
        " location.href])"
    )
    assert server.api_key not in stored
    assert page.get_by_label("Key or token").input_value() == ""
    page.reload()  # memory only: a reload signs out
    page.get_by_role("button", name="Sign in").wait_for()
    assert page.errors == []


def test_sessions_view_lists_cost_and_search_finds_a_transcript(
    page: Any, server: Server, seeded: dict[str, str]
) -> None:
    listed = require(server, "/v1/sessions?limit=50")
    by_id = {s["id"]: s for s in listed["data"]}
    sign_in(page, server)
    table = page.get_by_role("table")
    table.wait_for()
    row = page.get_by_role("row").filter(has_text="Write down what you know about pelicans")
    tools = by_id[seeded["tools"]]
    assert usd(tools["cost_usd"]) in row.inner_text()
    assert usd(tools["cache_savings_usd"]) in row.inner_text()
    shot(page, "03-sessions")

    page.get_by_label("Search transcripts").fill("pelican facts")
    page.get_by_role("button", name="Search").click()
    hit = page.get_by_role("link", name="Write down what you know about pelicans")
    hit.wait_for()
    assert "**" not in page.locator("#results").inner_text()  # match markers shown as <mark>
    shot(page, "04-search")
    hit.click()
    page.get_by_role("heading", name="Write down what you know about pelicans").wait_for()
    assert page.errors == []


def test_sessions_view_filters_by_end_user(
    page: Any, server: Server, simulator: Simulator, seeded: dict[str, str]
) -> None:
    simulator.reset()
    simulator.script([{"reply": {"text": "Otters hold hands while they sleep."}}])
    otters = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        headers=server.headers(),
        json={
            "model": "courier",
            "messages": [{"role": "user", "content": "Tell me about otters"}],
            "user": "olive",
        },
        timeout=90,
    )
    assert otters.status_code == 200, otters.text
    sign_in(page, server)
    page.get_by_role("table").wait_for()
    row = page.get_by_role("row").filter(has_text="Tell me about otters")
    assert "olive" in row.inner_text()
    page.get_by_label("End user").fill("olive")
    page.get_by_role("button", name="Filter").click()
    page.get_by_role("heading", name="Sessions of olive").wait_for()
    rows = page.locator("table.sessions tbody tr")
    assert rows.count() == 1 and "Tell me about otters" in rows.first.inner_text()
    assert page.evaluate("() => location.hash") == "#/sessions/olive"
    shot(page, "04b-sessions-of-an-end-user")
    assert page.errors == []


def test_transcript_shows_the_tool_call_its_result_and_the_cost(
    page: Any, server: Server, seeded: dict[str, str]
) -> None:
    sid = seeded["tools"]
    session = require(server, f"/v1/sessions/{sid}")
    require(server, f"/v1/sessions/{sid}/messages")
    sign_in(page, server)
    page.goto(f"{server.base_url}/console/#/session/{sid}")
    page.get_by_text("Tool call: write_file").wait_for()
    transcript = page.get_by_role("list", name="Messages")
    text = transcript.inner_text()
    assert "pelicans.md" in text and "I wrote the pelican facts" in text
    assert "Tool result · write_file" in text
    facts = page.locator("dl.facts").inner_text()
    assert usd(session["cost_usd"]) in facts
    # Each upstream call with its own cost, as the ledger has it.
    calls = require(server, f"/v1/sessions/{sid}/usage")["calls"]
    rows = page.get_by_role("table").filter(has_text="Upstream calls").locator("tbody tr")
    assert rows.count() == len(calls) == 2
    for row, call in zip(rows.all(), calls, strict=True):
        assert usd(call["cost_usd"]) in row.inner_text()
    shot(page, "05-transcript")
    assert page.errors == []


def test_approving_a_pending_command_lets_the_turn_finish(
    page: Any, server: Server, simulator: Simulator, workspace: Path, seeded: dict[str, str]
) -> None:
    require(server, "/v1/approvals?status=pending")
    junk = workspace / "junk"
    junk.mkdir(exist_ok=True)
    (junk / "old.log").write_text("stale")
    simulator.reset()
    simulator.script(
        [
            {"reply": {"tool_calls": [{"name": "terminal", "arguments": {"command": WIPE}}]}},
            {"expect": {"last_tool_result_contains": "exit code: 0"},
             "reply": {"text": "Cleaned out the junk folder."}},
        ]
    )  # fmt: skip
    result: dict[str, httpx.Response] = {}
    turn = threading.Thread(target=lambda: result.update(r=chat(server, "Clean up junk")))
    turn.start()
    try:
        sign_in(page, server)
        page.goto(f"{server.base_url}/console/#/approvals")
        card = page.get_by_role("article").filter(has_text="terminal")
        card.wait_for(timeout=30_000)
        assert WIPE in card.inner_text()
        assert (junk / "old.log").exists()  # nothing ran before the decision
        shot(page, "06-approval-pending")
        card.get_by_role("button", name="Approve once").click()
        page.get_by_text("Nothing is waiting.").wait_for(timeout=30_000)
    finally:
        turn.join(90)
    response = result["r"]
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Cleaned out the junk folder."
    assert not (junk / "old.log").exists()
    simulator.assert_script_done()
    sid = response.headers["x-session-id"]
    if api(server, f"/v1/sessions/{sid}").status_code == 404:
        return  # approvals landed before the sessions API: no transcript view to check yet
    page.goto(f"{server.base_url}/console/#/session/{sid}")
    page.get_by_text("Cleaned out the junk folder.").wait_for()
    page.get_by_text("Tool call: terminal").wait_for()
    shot(page, "07-approved-turn")
    assert page.errors == []


def test_a_running_turn_streams_into_the_live_panel(
    page: Any, server: Server, simulator: Simulator, seeded: dict[str, str]
) -> None:
    words = "Herons fish at dawn in the shallows and wait without moving a feather."
    simulator.reset()
    simulator.configure(tokens_per_second=6)  # a few seconds of streaming to watch
    simulator.script([{"reply": {"text": words}}])
    sid: list[str] = []
    done = threading.Event()

    def client() -> None:
        body = {
            "model": "courier",
            "stream": True,
            "messages": [{"role": "user", "content": "Tell me about herons at dawn"}],
        }
        url = f"{server.base_url}/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=server.headers(), timeout=90) as r:
            sid.append(r.headers["x-session-id"])
            for _ in r.iter_lines():
                pass
        done.set()

    turn = threading.Thread(target=client)
    turn.start()
    try:
        sign_in(page, server)
        while not sid:
            threading.Event().wait(0.05)
        page.goto(f"{server.base_url}/console/#/session/{sid[0]}")
        live = page.get_by_role("region", name="Live turn")
        live.wait_for(timeout=30_000)
        live.get_by_text("running").wait_for(timeout=30_000)
        shot(page, "09-live-turn")
        live.get_by_text("finished").wait_for(timeout=60_000)
        assert words in live.inner_text()  # every delta arrived, in order, once
    finally:
        turn.join(90)
    assert done.is_set()
    # The finished turn's answer lands in the transcript below.
    page.get_by_role("list", name="Messages").get_by_text(words).wait_for(timeout=30_000)
    simulator.assert_script_done()
    simulator.reset()
    assert page.errors == []


def test_spend_chart_matches_the_usage_api(
    page: Any, server: Server, seeded: dict[str, str]
) -> None:
    days = require(server, "/v1/usage?days=30")["data"]
    assert days, "seeded sessions made upstream calls"
    total = sum(Decimal(d["cost_usd"]) for d in days)
    sign_in(page, server)
    page.goto(f"{server.base_url}/console/#/spend")
    page.get_by_role("heading", name="Spend over time").wait_for()
    assert f"Last 30 days: {usd(str(total))}" in page.locator("main").inner_text()
    assert page.locator("figure svg rect.bar").count() == len(days)
    shot(page, "08-spend")
    assert page.errors == []


def test_phone_width_has_no_sideways_scroll(
    browser: Any, server: Server, seeded: dict[str, str]
) -> None:
    require(server, "/v1/sessions?limit=50")
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    page = context.new_page()
    try:
        sign_in(page, server)
        page.get_by_role("link", name="Write down what you know about pelicans").wait_for()
        shot(page, "09-sessions-phone")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
        page.goto(f"{server.base_url}/console/#/session/{seeded['tools']}")
        page.get_by_text("Tool call: write_file").wait_for()
        shot(page, "10-transcript-phone")
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


def test_the_usage_api_counts_only_the_callers_spend(server: Server) -> None:
    body = api(server, "/v1/usage?days=30").json()
    assert body["object"] == "list"
    assert all(set(d) >= {"day", "calls", "cost_usd"} for d in body["data"])
    assert api(server, "/v1/usage?days=0").status_code == 400
    anonymous = httpx.get(f"{server.base_url}/v1/usage")
    assert anonymous.status_code == 401
    json.dumps(body)  # serialisable as sent
