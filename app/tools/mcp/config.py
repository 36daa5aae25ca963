"""The MCP servers file (COURIER_MCP_CONFIG): the `{"mcpServers": {...}}` shape desktop
clients and editors already read, plus Courier's own keys per server.

Read once at start-up and frozen. A broken file is an operator's mistake, so it refuses
the start with one line (ConfigError) rather than failing turns later. No SDK import here:
`courier serve` checks the file before it imports anything heavy.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from app.config import ConfigError, Settings
from app.security.auth import fingerprint_of_digest

Approval = Literal["auto", "always", "never"]
Transport = Literal["stdio", "http"]

SERVER_NAME = re.compile(r"[A-Za-z0-9-]{1,24}")
"""No underscore: `__` must stay an unambiguous separator in `mcp__<server>__<tool>`."""
HTTP_TYPES = frozenset({"http", "streamable-http", "streamableHttp"})
KNOWN_KEYS = frozenset(
    {"type", "command", "args", "env", "cwd", "url", "headers", "disabled"}
    | {"tools", "approval", "profiles", "timeout_s"}
)
MAX_TIMEOUT_S = 3600.0


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One server as the file gives it; the values of `env` and `headers` are secrets."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    tools: tuple[str, ...] | None = None
    """Raw tool names offered; None offers every tool the server lists."""
    approval: Approval = "auto"
    profiles: tuple[str, ...] | None = None
    """Profiles whose sessions get this server; None means every profile but relays."""
    timeout_s: float | None = None
    unknown_keys: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """The server's identity without its secrets: a changed command or URL is another
        server, a rotated token is not."""
        shape = {
            "transport": self.transport,
            "command": self.command,
            "args": self.args,
            "env": sorted(name for name, _ in self.env),
            "cwd": self.cwd,
            "url": self.url,
            "headers": sorted(name for name, _ in self.headers),
            "tools": self.tools,
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()

    def offers(self, profile: str) -> bool:
        return self.profiles is None or profile in self.profiles

    def secrets(self) -> list[str]:
        return [value for _, value in (*self.env, *self.headers) if value]


@dataclass(frozen=True, slots=True)
class McpFile:
    path: Path
    servers: tuple[ServerConfig, ...]

    def secrets(self) -> list[str]:
        return [value for server in self.servers for value in server.secrets()]


def configured(settings: Settings) -> McpFile | None:
    """The settings' MCP servers file, parsed, or None when none is configured."""
    named = [k for k in settings.keys if k.mcp_servers]
    if settings.mcp_config is None:
        if named:
            raise ConfigError(
                f"key {named[0].name!r} names mcp_servers, but COURIER_MCP_CONFIG is unset"
            )
        return None
    found = load_mcp_file(settings.mcp_config, tuple(p.name for p in settings.all_profiles()))
    servers = {server.name for server in found.servers}
    for key in named:
        if unknown := sorted(set(key.mcp_servers or ()) - servers):
            raise ConfigError(f"key {key.name!r}: mcp_servers names unknown server(s) {unknown}")
    return found


def key_allowlists(settings: Settings) -> dict[str, frozenset[str]]:
    """Owner fingerprint -> the MCP servers its sessions may use, for the `[[keys]]` that
    say; a key not in the map may use every server its profile gets."""
    allowed: dict[str, frozenset[str]] = {}
    for key in settings.keys:
        if key.mcp_servers is None:
            continue
        raw = key.key.get_secret_value().encode() if key.key is not None else None
        digest = hashlib.sha256(raw).hexdigest() if raw is not None else key.key_sha256 or ""
        allowed[fingerprint_of_digest(digest)] = frozenset(key.mcp_servers)
    return allowed


@functools.lru_cache(maxsize=8)
def load_mcp_file(path: Path, profiles: tuple[str, ...]) -> McpFile:
    """The file at `path`, checked against the configured profile names; memoised, so the
    process reads it once however many places (redaction, the hub, doctor) ask."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"COURIER_MCP_CONFIG={path}: cannot read it ({exc.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"COURIER_MCP_CONFIG={path}: not valid JSON ({exc})") from None
    return parse_mcp_file(raw, path=path, profiles=profiles)


def parse_mcp_file(raw: object, *, path: Path, profiles: tuple[str, ...]) -> McpFile:
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise ConfigError(f"COURIER_MCP_CONFIG={path}: expected an object with mcpServers")
    servers: list[ServerConfig] = []
    for name, entry in sorted(raw["mcpServers"].items()):
        try:
            server = parse_server(name, entry, profiles=profiles)
        except ValueError as exc:
            raise ConfigError(f"COURIER_MCP_CONFIG={path}: server {name!r}: {exc}") from None
        if server is not None:
            servers.append(server)
    return McpFile(path=path, servers=tuple(servers))


def parse_server(name: str, entry: object, *, profiles: tuple[str, ...]) -> ServerConfig | None:
    """One server, or None when it is disabled; ValueError says what is wrong."""
    if not SERVER_NAME.fullmatch(name):
        raise ValueError("names are 1-24 letters, digits or dashes (no underscores)")
    if not isinstance(entry, dict):
        raise ValueError("expected an object")
    if entry.get("disabled") is True:
        return None
    transport = _transport(entry)
    common: dict[str, Any] = {
        "name": name,
        "transport": transport,
        "tools": _names(entry, "tools"),
        "approval": _approval(entry.get("approval", "auto")),
        "profiles": _profiles(entry, profiles),
        "timeout_s": _timeout(entry.get("timeout_s")),
        "unknown_keys": tuple(sorted(set(entry) - KNOWN_KEYS)),
    }
    if transport == "http":
        return ServerConfig(url=_url(entry.get("url")), headers=_pairs(entry, "headers"), **common)
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError("command must be a non-empty string")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError("cwd must be a string")
    return ServerConfig(
        command=command,
        args=_strings(entry.get("args", []), "args"),
        env=_pairs(entry, "env"),
        cwd=cwd,
        **common,
    )


def _transport(entry: Mapping[str, Any]) -> Transport:
    kind = entry.get("type")
    if kind == "sse":
        raise ValueError("the deprecated sse transport is not supported; use streamable HTTP")
    if kind is None:
        if "command" in entry and "url" in entry:
            raise ValueError("give command (stdio) or url (http), not both")
        if "url" in entry:
            return "http"
        if "command" in entry:
            return "stdio"
        raise ValueError("give command (a stdio server) or url (an HTTP server)")
    if kind == "stdio":
        return "stdio"
    if kind in HTTP_TYPES:
        return "http"
    raise ValueError(f"unknown type {kind!r} (stdio or http)")


def _url(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("url must be a string")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("url must not carry a user or password; use headers")
    return value


def _strings(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings")
    return tuple(value)


def _names(entry: Mapping[str, Any], key: str) -> tuple[str, ...] | None:
    return None if entry.get(key) is None else _strings(entry[key], key)


def _pairs(entry: Mapping[str, Any], key: str) -> tuple[tuple[str, str], ...]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{key} must be an object of string values")
    return tuple(sorted(value.items()))


def _approval(value: object) -> Approval:
    if value == "auto" or value == "always" or value == "never":
        return value
    raise ValueError("approval must be auto, always or never")


def _profiles(entry: Mapping[str, Any], known: tuple[str, ...]) -> tuple[str, ...] | None:
    wanted = _names(entry, "profiles")
    if wanted is not None and (unknown := sorted(set(wanted) - set(known))):
        raise ValueError(f"profiles names unknown profile(s) {unknown}")
    return wanted


def _timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("timeout_s must be a number of seconds")
    if not 0 < value <= MAX_TIMEOUT_S:
        raise ValueError(f"timeout_s must be above 0 and at most {MAX_TIMEOUT_S:g}")
    return float(value)
