"""The MCP servers file: the shapes other MCP hosts write, Courier's keys, and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import ConfigError, KeyConfig, Settings
from app.tools.mcp.config import configured, key_allowlists, load_mcp_file, parse_mcp_file

PROFILES = ("courier", "coder")


def parse(servers: dict[str, object]) -> list:
    return list(
        parse_mcp_file({"mcpServers": servers}, path=Path("mcp.json"), profiles=PROFILES).servers
    )


def test_the_desktop_clients_shape_is_read() -> None:
    git, search, time = parse(
        {
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
            "git": {
                "command": "uvx",
                "args": ["mcp-server-git"],
                "env": {"GIT_AUTHOR_NAME": "bot"},
                "tools": ["git_status"],
                "approval": "always",
                "profiles": ["coder"],
            },
            "search": {
                "type": "streamableHttp",
                "url": "https://mcp.example.com/mcp",
                "headers": {"Authorization": "Bearer tok-123456"},
                "timeout_s": 20,
            },
        }
    )
    assert (time.name, time.transport, time.args) == ("time", "stdio", ("--local-timezone", "UTC"))
    assert time.approval == "auto" and time.profiles is None and time.tools is None
    assert git.env == (("GIT_AUTHOR_NAME", "bot"),) and git.tools == ("git_status",)
    assert git.approval == "always" and git.offers("coder") and not git.offers("courier")
    assert search.transport == "http" and search.timeout_s == 20.0
    assert search.secrets() == ["Bearer tok-123456"]


@pytest.mark.parametrize(
    ("name", "entry", "says"),
    [
        ("a_b", {"command": "x"}, "no underscores"),
        ("x" * 25, {"command": "x"}, "1-24"),
        ("s", {"type": "sse", "url": "https://a.example/sse"}, "sse"),
        ("s", {"url": "ftp://a.example/"}, "http:// or https://"),
        ("s", {"url": "https://user:pw@a.example/"}, "user or password"),
        ("s", {"command": "x", "url": "https://a.example/"}, "not both"),
        ("s", {}, "give command"),
        ("s", {"command": "x", "approval": "sometimes"}, "approval"),
        ("s", {"command": "x", "profiles": ["nobody"]}, "unknown profile"),
        ("s", {"command": "x", "env": {"A": 1}}, "env"),
        ("s", {"command": "x", "args": "--flag"}, "args"),
        ("s", {"command": "x", "timeout_s": 0}, "timeout_s"),
        ("s", {"command": "x", "type": "websocket"}, "unknown type"),
    ],
)
def test_a_broken_server_refuses_the_start_in_one_line(
    name: str, entry: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse({name: entry})
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_disabled_servers_are_skipped_and_unknown_keys_kept_for_doctor() -> None:
    (only,) = parse({"off": {"command": "x", "disabled": True}, "on": {"command": "y", "z": 1}})
    assert only.name == "on" and only.unknown_keys == ("z",)


def test_the_digest_ignores_secret_values_but_not_the_command() -> None:
    a, b, c = (
        parse({"s": {"command": command, "env": {"TOKEN": value}}})[0]
        for command, value in (("x", "one"), ("x", "two"), ("y", "one"))
    )
    assert a.digest == b.digest != c.digest


def test_a_missing_or_broken_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_mcp_file(tmp_path / "none.json", PROFILES)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_mcp_file(bad, PROFILES)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"servers": {}}))
    with pytest.raises(ConfigError, match="mcpServers"):
        load_mcp_file(wrong, PROFILES)


def test_a_keys_mcp_servers_must_name_servers_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"time": {"command": "mcp-server-time"}}}))

    def settings(servers: tuple[str, ...], mcp: Path | None) -> Settings:
        key = KeyConfig(name="narrow", key_sha256="a" * 64, mcp_servers=servers)
        return Settings(api_key="test-key-0123456789abcdef", keys=(key,), mcp_config=mcp)

    assert configured(settings(("time",), path)) is not None
    assert key_allowlists(settings(("time",), path)) == {"key_" + "a" * 16: frozenset({"time"})}
    with pytest.raises(ConfigError, match=r"unknown server\(s\) \['git'\]"):
        configured(settings(("git",), path))
    with pytest.raises(ConfigError, match="COURIER_MCP_CONFIG is unset"):
        configured(settings(("time",), None))
