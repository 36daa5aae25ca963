"""One MCP server's connection against real servers (the SDK-built toolbox, over stdio
and HTTP): calls, a crash mid-call, a timeout, list_changed, the environment, egress."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from app.tools.mcp.config import ServerConfig, parse_server
from app.tools.mcp.connection import McpConnection, Timeouts
from app.tools.mcp.launch import Limits
from tests.support.mcp import http_toolbox, stdio_toolbox, toolbox_counts

SECRET = "canary-secret-value-0123456789"


def server(name: str = "toolbox", **entry: object) -> ServerConfig:
    config = parse_server(name, entry or stdio_toolbox(), profiles=("courier",))
    assert config is not None
    return config


async def until(check: Callable[[], bool], what: str, tries: int = 600) -> None:
    for _ in range(tries):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


@pytest.fixture
async def connect(tmp_path: Path) -> AsyncIterator[Callable[..., McpConnection]]:
    made: list[McpConnection] = []

    def make(
        config: ServerConfig, *, allow: tuple[str, ...] = (), connect_s: float = 30
    ) -> McpConnection:
        conn = McpConnection(
            config,
            data_dir=tmp_path,
            url_allow=allow,
            timeouts=Timeouts(connect_s=connect_s, call_s=30),
            limits=Limits(memory_bytes=4 << 30, file_size_bytes=1 << 30),
            on_listing=lambda c: None,
        )
        conn.start()
        made.append(conn)
        return conn

    yield make
    for conn in made:
        await conn.aclose()


def names(conn: McpConnection) -> set[str]:
    return {tool.name for tool in conn.listing or ()}


async def test_a_stdio_server_lists_and_answers(connect: Callable[..., McpConnection]) -> None:
    conn = connect(server())
    await until(lambda: conn.health.state == "ready", "ready")
    assert {"echo", "crash", "grow"} <= names(conn)
    outcome, kind = await conn.call("echo", {"text": "hello there"})
    assert kind == "ok" and "toolbox echo: hello there" in outcome.content
    outcome, kind = await conn.call("fail", {"reason": "no"})
    assert kind == "tool_error" and outcome.is_error and "error:" in outcome.content


async def test_the_server_environment_holds_no_secret_of_courier(
    connect: Callable[..., McpConnection], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURIER_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    conn = connect(server(**stdio_toolbox(env={"GIVEN": "by-the-file"})))
    await until(lambda: conn.health.state == "ready", "ready")
    outcome, _ = await conn.call("env_dump", {})
    dumped = json.loads(outcome.content.split("\n", 1)[1].rsplit("\n", 1)[0])
    assert hashlib.sha256(SECRET.encode()).hexdigest() not in dumped["hashes"]
    assert not [n for n in dumped["names"] if n.startswith("COURIER_") or n.endswith("_API_KEY")]
    assert "GIVEN" in dumped["names"]
    assert dumped["home"] == str(tmp_path / "mcp" / "toolbox" / "home") == dumped["cwd"]
    assert os.stat(dumped["home"]).st_mode & 0o077 == 0


async def test_a_crash_mid_call_is_an_error_result_then_a_restart(
    connect: Callable[..., McpConnection], tmp_path: Path
) -> None:
    conn = connect(server())
    await until(lambda: conn.health.state == "ready", "ready")
    outcome, kind = await conn.call("crash", {})
    assert kind == "closed" and outcome.is_error and "stopped during this call" in outcome.content
    await until(lambda: conn.health.reconnects >= 1, "a reconnect")
    await until(lambda: conn.health.state == "ready", "ready again")
    outcome, kind = await conn.call("echo", {"text": "after the crash"})
    assert kind == "ok" and "after the crash" in outcome.content
    home = tmp_path / "mcp" / "toolbox" / "home"
    assert toolbox_counts(home) == {"crash": 1, "echo": 1}


async def test_a_slow_call_times_out_and_the_server_goes_on(
    connect: Callable[..., McpConnection],
) -> None:
    conn = connect(server(**stdio_toolbox(timeout_s=1)))
    await until(lambda: conn.health.state == "ready", "ready")
    outcome, kind = await conn.call("slow", {"seconds": 30})
    assert kind == "timeout" and "did not answer within 1 s" in outcome.content
    outcome, kind = await conn.call("echo", {"text": "still here"})
    assert kind == "ok"


async def test_three_failures_in_a_row_open_the_breaker(
    connect: Callable[..., McpConnection],
) -> None:
    conn = connect(server(**stdio_toolbox(timeout_s=1)))
    await until(lambda: conn.health.state == "ready", "ready")
    slow = [conn.call("slow", {"seconds": 30}) for _ in range(3)]
    assert [kind for _, kind in await asyncio.gather(*slow)] == ["timeout"] * 3
    outcome, kind = await conn.call("echo", {"text": "x"})
    assert kind == "unavailable" and "failed several calls in a row" in outcome.content
    assert conn.health.breaker_open_until is not None
    assert conn.health.calls["timeout"] == 3 and conn.health.calls["ok"] == 0


async def test_a_missing_command_backs_off_and_calls_fail_at_once(
    connect: Callable[..., McpConnection],
) -> None:
    conn = connect(server(command="no-such-mcp-server"))
    await until(lambda: conn.health.state == "backoff", "backoff")
    assert "no-such-mcp-server" in (conn.health.last_error or "")
    outcome, kind = await conn.call("echo", {"text": "x"})
    assert kind == "unavailable" and "is unavailable" in outcome.content


async def test_a_server_that_never_answers_is_cut_off_at_the_connect_timeout(
    connect: Callable[..., McpConnection],
) -> None:
    conn = connect(server(command="sleep", args=["600"]), connect_s=1)
    await until(lambda: conn.health.state == "backoff", "backoff")
    assert "no answer within 1 s" in (conn.health.last_error or "")
    _, kind = await conn.call("echo", {"text": "x"})
    assert kind == "unavailable"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_list_changed_relists(
    connect: Callable[..., McpConnection], tmp_path: Path, transport: str
) -> None:
    with http_toolbox(tmp_path / "http") as url:
        config = server() if transport == "stdio" else server(url=url)
        conn = connect(config, allow=(url.split("/")[2],))
        await until(lambda: conn.health.state == "ready", "ready")
        assert "grown" not in names(conn)
        _, kind = await conn.call("grow", {})
        assert kind == "ok"
        await until(lambda: "grown" in names(conn), "grown listed")
        outcome, _ = await conn.call("grown", {})
        assert "grown answers" in outcome.content


async def test_a_loopback_url_is_refused_unless_allowed(
    connect: Callable[..., McpConnection], tmp_path: Path
) -> None:
    with http_toolbox(tmp_path / "http") as url:
        refused = connect(server("refused", url=url))
        await until(lambda: refused.health.state == "backoff", "backoff")
        assert "loopback" in (refused.health.last_error or "")
        assert "COURIER_MCP_URL_ALLOW" in (refused.health.last_error or "")
        allowed = connect(server("allowed", url=url), allow=(url.split("/")[2],))
        await until(lambda: allowed.health.state == "ready", "ready")
        outcome, kind = await allowed.call("echo", {"text": "over http"})
        assert kind == "ok" and "over http" in outcome.content
        assert toolbox_counts(tmp_path / "http") == {"echo": 1}
