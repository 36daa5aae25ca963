"""An MCP tool's image reaches the model on both wires, and stays in the history: the
real Courier server over HTTP, the SDK-built toolbox over stdio, the simulator upstream
(whose recorded request bodies are what the model was sent)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.simulator import anthropic_wire
from tests.support.approvals import call
from tests.support.mcp import http_toolbox, stdio_toolbox, write_config
from tests.support.mcp_servers.toolbox import PIXEL
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

ADMIN_KEY = "admin-key-for-mcp-image-tests-0123456789"
IMAGE_BLOCK = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
}
IMAGE_PART = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}}


def start(servers: ServerFactory, provider: str, root: Path) -> Server:
    config = write_config(root / "mcp.json", {"toolbox": stdio_toolbox(approval="never")})
    server = servers(provider, COURIER_MCP_CONFIG=str(config), COURIER_ADMIN_API_KEY=ADMIN_KEY)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for _ in range(1200):
        resp = httpx.get(f"{server.base_url}/v1/mcp/servers", headers=admin, timeout=10)
        assert resp.status_code == 200, resp.text
        [toolbox] = resp.json()["data"]
        if toolbox["state"] == "ready" and toolbox["tools"]:
            return server
        time.sleep(0.05)
    raise AssertionError("the toolbox never became ready")


def chat(server: Server, text: str, session: str | None = None) -> str:
    """One turn; the session's id (a new one when `session` is None)."""
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": text}]},
        headers=server.headers(**({"X-Session-Id": session} if session else {})),
        timeout=120,
    )
    assert resp.status_code == 200, resp.text
    return resp.headers["x-session-id"]


def bodies(sim: Simulator) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in sim.requests()]


def canonical(provider: str, body: dict[str, Any]) -> list[str]:
    """The body's history as the provider caches it: Anthropic's cache breakpoints move
    from turn to turn by design, so its segments are compared without them."""
    if provider == "anthropic":
        return [f"{s.header}\n{s.body}" for s in anthropic_wire.parse(body).segments]
    return [json.dumps(m, sort_keys=True) for m in body["messages"]]


def images_sent(provider: str, body: dict[str, Any]) -> list[Any]:
    """Every image in the body, where the wire carries a tool's: inside the tool_result
    (Anthropic), in the user message after the results (OpenAI chat)."""
    found: list[Any] = []
    for message in body["messages"]:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if provider == "anthropic" and part.get("type") == "tool_result":
                inner = part.get("content")
                found += (
                    [b for b in inner if b["type"] == "image"] if isinstance(inner, list) else []
                )
            elif provider == "openai" and part.get("type") == "image_url":
                found.append(part)
    return found


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_tool_image_is_sent_and_resent_identically(
    servers: ServerFactory, sim: Simulator, tmp_path: Path, provider: str
) -> None:
    server = start(servers, provider, tmp_path)
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__toolbox__image")]}},
            {"reply": {"text": "a small picture"}},
            {"reply": {"text": "still the same picture"}},
        ]
    )
    session = chat(server, "show me the picture")
    chat(server, "and again?", session)
    sim.assert_script_done()
    _, after_tool, next_turn = bodies(sim)
    expected = IMAGE_BLOCK if provider == "anthropic" else IMAGE_PART
    assert images_sent(provider, after_tool) == [expected]
    assert images_sent(provider, next_turn) == [expected]
    # The next turn's history begins with this turn's, byte for byte (the cached prefix).
    sent, resent = canonical(provider, after_tool), canonical(provider, next_turn)
    assert len(resent) > len(sent) and resent[: len(sent)] == sent
    sent = after_tool["messages"]
    text = json.dumps(sent)
    assert "a picture follows" in text and "[image image/png, 16 bytes, attached]" in text
    if provider == "openai":
        roles = [m["role"] for m in sent]
        # The tool's result right after the call; the image after it, never between.
        assert roles[-3:] == ["assistant", "tool", "user"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_odd_images_stay_placeholders_and_the_turn_goes_on(
    servers: ServerFactory, sim: Simulator, tmp_path: Path, provider: str
) -> None:
    server = start(servers, provider, tmp_path)
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__toolbox__odd_images")]}},
            {"reply": {"text": "nothing to see"}},
        ]
    )
    chat(server, "show me the odd pictures")
    sim.assert_script_done()
    body = bodies(sim)[-1]
    assert images_sent(provider, body) == []
    text = json.dumps(body["messages"])
    assert "[image image/svg+xml, 41 bytes, not shown]" in text
    assert "odd pictures follow" in text and text.count("not shown]") == 2


def test_a_remote_mcp_tools_image_reaches_the_model_too(
    servers: ServerFactory, sim: Simulator, tmp_path: Path
) -> None:
    # A Responses request's own server (`tools: [{"type": "mcp"}]`), not a configured one.
    with http_toolbox(tmp_path / "remote") as url:
        server = servers(COURIER_MCP_URL_ALLOW=url.split("/")[2])
        sim.script(
            [
                {"reply": {"tool_calls": [call("mcp__tb__image")]}},
                {"reply": {"text": "seen"}},
            ]
        )
        resp = httpx.post(
            f"{server.base_url}/v1/responses",
            json={
                "model": "courier",
                "input": "show me",
                "tools": [
                    {
                        "type": "mcp",
                        "server_label": "tb",
                        "server_url": url,
                        "require_approval": "never",
                    }
                ],
            },
            headers=server.headers(),
            timeout=120,
        )
        assert resp.status_code == 200, resp.text
        server.stop()
    sim.assert_script_done()
    assert images_sent("openai", bodies(sim)[-1]) == [IMAGE_PART]
