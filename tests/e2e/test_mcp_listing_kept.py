"""A configured MCP server's listing survives a restart: the real server restarted on its
data directory, the SDK-built toolbox over streamable HTTP as the server (gone by the
second start, so the tools can only come from the stored listing)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.mcp import http_toolbox, write_config
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

ADMIN_KEY = "admin-key-for-mcp-restart-0123456789"


def status(server: Server) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = httpx.get(f"{server.base_url}/v1/mcp/servers", headers=admin, timeout=10)
    assert resp.status_code == 200, resp.text
    (entry,) = resp.json()["data"]
    return dict(entry)


def chat(server: Server, text: str, session: str | None = None) -> str:
    headers = server.headers(**({"X-Session-Id": session} if session else {}))
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=headers,
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-session-id"]


def offered(sim: Simulator) -> set[str]:
    body = json.loads(sim.requests()[-1]["body"])
    return {tool["function"]["name"] for tool in body.get("tools", [])}


def test_a_restart_offers_the_stored_listing_and_breaks_no_cache(
    servers: ServerFactory, sim: Simulator, tmp_path: Path
) -> None:
    with http_toolbox(tmp_path / "web") as url:
        config = write_config(tmp_path / "mcp.json", {"web": {"url": url}})
        first = servers(
            COURIER_MCP_CONFIG=str(config),
            COURIER_MCP_URL_ALLOW=url.split("/")[2],
            COURIER_ADMIN_API_KEY=ADMIN_KEY,
        )
        for _ in range(1200):
            if (found := status(first))["state"] == "ready" and found["tools"]:
                break
            time.sleep(0.05)
        assert status(first)["listing_from"] == "live"
        sim.script([{"reply": {"text": "one"}}, {"reply": {"text": "two"}}])
        session = chat(first, "before the restart")
        assert "mcp__web__echo" in offered(sim)
        first.stop()
    # The toolbox is gone: whatever the second start offers comes from the database.
    second = servers.like(first, data_dir=first.data_dir)
    found = status(second)
    assert found["state"] != "ready"
    assert found["listing_from"] == "persisted"
    assert "mcp__web__echo" in {t["name"] for t in found["tools"]}
    chat(second, "after the restart", session)
    assert "mcp__web__echo" in offered(sim)
    usage = httpx.get(
        f"{second.base_url}/v1/sessions/{session}/usage", headers=second.headers(), timeout=10
    ).json()
    assert [c["cache_break"] for c in usage["calls"] if c["cache_break"]] == []
