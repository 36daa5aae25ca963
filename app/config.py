"""Settings: one pydantic-settings object, read once at startup and frozen.

Anything that widens trust (the API key, the bind address, the host-exec override) is read
here exactly once. Re-reading the environment later would let code running inside the
process (a tool, a generated script) flip a security switch with one `os.environ` write.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import dataclass
from decimal import Decimal
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from app.settings import database_url as db_url
from app.settings.trusted_networks import trusted_network
from app.settings.work import WorkSettings, webhook_problem

MIN_KEY_LENGTH = 16
MIN_KEY_DISTINCT_CHARS = 8
"""`abcdabcdabcdabcd` is 16 characters long and guessable in a handful of tries."""
_PLACEHOLDER_KEYS = frozenset(
    {"changeme", "change-me", "changeit", "secret", "your-api-key", "replace-me", "apikey"}
)


class ConfigError(ValueError):
    """A refusal to start; its message is the one line the operator sees."""


def key_problem(key: str) -> str | None:
    """Why `key` is unfit to guard an endpoint that runs tools, or None when it is fine."""
    lowered = key.strip().lower()
    if not lowered:
        return (
            "COURIER_API_KEY is not set; run `courier keygen` and export the key it prints, "
            "or put it in a file named by COURIER_API_KEY_FILE"
        )
    if (
        lowered in _PLACEHOLDER_KEYS
        or lowered.startswith(("password", "sk-xxxx", "changeme", "your-"))
        or len(set(lowered)) == 1
    ):
        return "COURIER_API_KEY is a placeholder; run `courier keygen` for a real one"
    if len(key) < MIN_KEY_LENGTH:
        return (
            f"COURIER_API_KEY is {len(key)} characters; at least {MIN_KEY_LENGTH} are required "
            "(run `courier keygen`)"
        )
    if len(set(key)) < MIN_KEY_DISTINCT_CHARS or _repeats(key):
        return (
            f"COURIER_API_KEY is a short pattern repeated or has fewer than "
            f"{MIN_KEY_DISTINCT_CHARS} distinct characters; run `courier keygen` for a real one"
        )
    return None


def _repeats(key: str) -> bool:
    """Whether `key` is one piece written at least twice over (`abcdabcdab`)."""
    return any(
        all(key[i] == key[i + period] for i in range(len(key) - period))
        for period in range(1, len(key) // 2 + 1)
    )


def upstream_problem(settings: Settings) -> str | None:
    """Why `courier serve` must not start with these upstreams, or None.

    A profile with neither a key nor a base URL would send every prompt to the provider's
    public endpoint without credentials: a setup mistake that fails only at the first turn,
    with every turn's text already on its way to a third party. A keyless local server
    (Ollama, llama.cpp, the simulator) names itself by its base URL.
    """
    for position, profile in enumerate(settings.all_profiles()):
        if profile.api_key or profile.api_keys or profile.base_url:
            continue
        if position == 0:  # the default profile, from the flat environment names
            names = "COURIER_UPSTREAM_API_KEY nor COURIER_UPSTREAM_BASE_URL is"
        else:
            names = f"api_key nor base_url of profile {profile.name!r} is"
        return (
            f"refusing to start: neither {names} set, so turns would go to the "
            f"provider's public endpoint without a key; set the key, or the base URL of a "
            "keyless local server (Ollama, the simulator)"
        )
    return None


class PriceOverrideConfig(BaseModel):
    """Contract prices in USD per million tokens, for private deployments."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_per_mtok: Decimal | None = None
    output_per_mtok: Decimal | None = None
    cache_read_per_mtok: Decimal | None = None
    cache_write_per_mtok: Decimal | None = None
    included: bool = False
    """A flat-rate contract: calls cost nothing at the margin and report `included`."""


BusyStrategy = Literal["reject", "enqueue", "interrupt", "steer"]
"""What a message to a session whose turn is running does (app/api/chat/busy_policy.py)."""
DisconnectPolicy = Literal["cancel", "continue"]
ProfileKind = Literal["chat", "voice"]
"""Who talks to a profile: a chat window, or a voice client whose users barge in."""
DEFAULT_BUSY: dict[str, BusyStrategy] = {"chat": "enqueue", "voice": "interrupt"}
"""A voice barge-in is a new user turn: queueing it behind the answer it talked over would
speak that stale answer to the end first. A chat message typed meanwhile waits its turn."""


def _busy_by_kind(data: Any) -> Any:
    # Filled before validation, so `busy` stays a plain strategy for every reader.
    if isinstance(data, dict) and data.get("busy") is None:
        data = {k: v for k, v in data.items() if k != "busy"}
        kind = data.get("kind", "chat")
        if kind in DEFAULT_BUSY:
            data["busy"] = DEFAULT_BUSY[kind]
    return data


GiB = 1024**3


@dataclass(frozen=True, slots=True)
class ToolQuota:
    """What one session's tools may consume, built from its profile (`Profile.tool_quota`).

    A plain record here rather than in `app/tools/`, so that the settings import nothing
    of what they configure and `ToolContext` can carry it."""

    workspace_bytes: int = 1 * GiB
    """Bytes (allocated on disk) the workspace may hold."""
    disk_reserve_bytes: int = 1 * GiB
    """Free space below which tool writes are refused (Courier's own writes never are)."""
    memory_bytes: int = 2 * GiB
    """Per terminal call: a memory cgroup limit, or RLIMIT_AS where no cgroup can be made."""
    cpu_seconds: int = 600
    """Per process of a terminal call (RLIMIT_CPU)."""
    file_size_bytes: int = 1 * GiB
    """Largest file a terminal call may write (RLIMIT_FSIZE); also capped by the quota left."""


class Profile(BaseModel):
    """One agent profile: the model id clients see and the upstream that serves it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "courier"
    """The model id clients see in `/v1/models` and send as `model`."""
    provider: Literal["openai", "anthropic"] = "openai"
    """Wire format: `openai` = chat completions, `anthropic` = Messages."""
    base_url: str | None = None
    """Upstream base URL; None means the provider's public endpoint."""
    api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    """The upstream model id."""
    context_window: int = Field(default=128_000, ge=1024)
    max_output_tokens: int = Field(default=8192, ge=1)
    max_iterations: int = Field(default=90, ge=1, le=10_000)
    """Upstream calls one turn may make before it must answer without tools."""
    accept_any_model: bool = False
    """Serve requests naming any model id instead of answering 404 `model_not_found`."""
    cache_markers: bool = False
    """OpenAI-wire routes that accept `cache_control` markers (envelope routes)."""
    cache_ttl: Literal["5m", "1h"] = "5m"
    cache_ttl_supported: Literal["5m", "1h"] = "1h"
    """The longest TTL the route honours; a 1 h request is clamped to it."""
    cache_strategy: Literal["planner", "naive", "none"] = "planner"
    """Breakpoint placement: the planner, or baselines kept for benchmarks."""
    instructions: str = ""
    """Profile instructions, part of the context tier of the system prompt."""
    workspace: Path | None = None
    """A shared working directory for every session of this profile; None = one per session."""
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    retry_attempts: int = Field(default=3, ge=1, le=10)
    """Attempts per upstream call for retryable failures before any output arrived."""
    retry_base_delay_s: float = Field(default=2.0, ge=0)
    prices: PriceOverrideConfig | None = None
    allow_unpriced: bool = False
    compaction_threshold: float | None = Field(default=None, gt=0, le=1)
    """Share of (window - max output) at which to compact; None = 50 %, 75 % under 512K."""
    calibrated_trigger: bool = True
    """Fire compaction on the estimate re-anchored to billed usage (off: the raw estimate,
    kept only as a baseline for benchmarks)."""
    summary_model: str | None = None
    """A cheaper upstream model for compaction summaries; None = the profile's model."""
    prune_trigger_tokens: int = Field(default=0, ge=0)
    prune_mid_burst: bool = False
    """Prune while the prefix is warm too (it breaks the cache); off by default."""
    toolsets: tuple[str, ...] = ("core", "web", "memory")
    """Which toolsets this profile's sessions get."""
    terminal_backend: Literal["sandbox", "local"] = "sandbox"
    """`sandbox` runs commands under bubblewrap; `local` runs them on the host (opt-in)."""
    terminal_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    network: bool = False
    """Let tools reach the network (the terminal sandbox shares the host network)."""
    fetch_allow_hosts: tuple[str, ...] = ()
    """Hosts or CIDRs web_fetch may reach although private or loopback."""
    approval_timeout_s: float = Field(default=120.0, gt=0, le=24 * 3600)
    """How long a call that needs a human waits before it is denied."""
    unattended: Literal["ask", "deny", "allow"] = "ask"
    """Calls that need approval: ask a human, deny them, or allow them (the floor and
    protected writes still hold under `allow`)."""
    instruction_files: tuple[Path, ...] = ()
    """Files that steer this profile's behaviour: every write to one needs a human."""
    aliases: tuple[str, ...] = ()
    """More model ids that name this profile (`gpt-4.1`, `gpt-4o-mini`: what apps default to)."""
    relay: bool = False
    """A plain relay: no server tools, nothing stored but the usage ledger (side requests
    such as an app's title and tag generation)."""
    implicit_sessions: bool = True
    """Continue the stored conversation a request without a session id resends."""
    prefill: bool | None = None
    """Continue a trailing assistant message; None = what the wire supports (Anthropic)."""
    api_keys: tuple[SecretStr, ...] = ()
    """More upstream keys beside `api_key`, rotated on rate-limit and auth failures."""
    key_cooldown_s: float = Field(default=60.0, ge=0)
    """How long a throttled key rests (a refused one ten times longer), unless the upstream
    said how long with Retry-After."""
    kind: ProfileKind = "chat"
    """`voice` changes defaults for spoken conversations (`busy` = `interrupt`)."""
    busy: BusyStrategy = "enqueue"
    """Default `X-Courier-Busy`; unset, it follows `kind`: chat `enqueue`, voice `interrupt`
    (a barge-in is a new user turn)."""
    on_disconnect: DisconnectPolicy = "cancel"
    """Default `X-Courier-On-Disconnect`: `continue` finishes a turn whose client left."""
    fallback: tuple[str, ...] = ()
    """Profiles to send the same request to, in order, when this one's upstream cannot
    serve it (an outage, exhausted keys, an unknown model)."""
    max_continuations: int = Field(default=2, ge=0, le=20)
    """Follow-up calls that continue a text answer cut by the output token limit; past
    them the turn ends `truncated` with `finish_reason: length`."""
    workspace_quota_bytes: int = Field(default=GiB, ge=0)
    """Bytes a session's workspace may hold; file writes past it are refused."""
    disk_reserve_bytes: int = Field(default=GiB, ge=0)
    """Tool writes are refused while the workspace's filesystem has less free space."""
    tool_memory_bytes: int = Field(default=2 * GiB, ge=64 * 1024 * 1024)
    """Memory one terminal call may use (memory cgroup, else RLIMIT_AS)."""
    tool_cpu_s: int = Field(default=600, ge=1)
    """CPU seconds per process of a terminal call (RLIMIT_CPU)."""
    tool_file_size_bytes: int = Field(default=GiB, ge=1024)
    """Largest file a terminal call may write (RLIMIT_FSIZE)."""

    @model_validator(mode="before")
    @classmethod
    def _busy_default(cls, data: Any) -> Any:
        return _busy_by_kind(data)

    @model_validator(mode="before")
    @classmethod
    def _web_needs_network(cls, data: Any) -> Any:
        # web_fetch always fails without network: offering it anyway costs schema tokens
        # on every request and invites calls that can only error.
        if isinstance(data, dict) and data.get("network") is not True:
            toolsets = data.get("toolsets", cls.model_fields["toolsets"].default)
            if isinstance(toolsets, list | tuple):
                data = {**data, "toolsets": tuple(t for t in toolsets if t != "web")}
        return data

    def tool_quota(self) -> ToolQuota:
        return ToolQuota(
            workspace_bytes=self.workspace_quota_bytes,
            disk_reserve_bytes=self.disk_reserve_bytes,
            memory_bytes=self.tool_memory_bytes,
            cpu_seconds=self.tool_cpu_s,
            file_size_bytes=self.tool_file_size_bytes,
        )


SCOPES = ("chat", "sessions:read", "approvals", "metrics", "admin")
RESERVED_KEY_NAMES = frozenset({"default", "admin", "metrics"})
"""Names of the keys given by COURIER_API_KEY, COURIER_ADMIN_API_KEY, COURIER_METRICS_API_KEY."""
MIN_TOKEN_SECRET_BYTES = 32
_HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+")
"""An HTTP field name (RFC 9110 `token`)."""


class KeyConfig(BaseModel):
    """One API key: who it is, what it may do, and how much."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=64)
    key: SecretStr | None = None
    """The key itself; prefer `key_sha256` so the config file holds no secret."""
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    """The hex SHA-256 of the key (`printf %s "$KEY" | sha256sum`)."""
    scopes: tuple[Literal["chat", "sessions:read", "approvals", "metrics", "admin"], ...] = (
        "chat",
        "sessions:read",
    )
    requests_per_minute: int | None = Field(default=None, ge=1)
    max_concurrent_turns: int | None = Field(default=None, ge=1)
    spend_cap_usd: Decimal | None = Field(default=None, ge=0)
    spend_cap_daily_usd: Decimal | None = Field(default=None, ge=0)
    mcp_servers: tuple[str, ...] | None = None
    """The MCP servers (names in COURIER_MCP_CONFIG) this key's sessions may use; unset,
    every server its sessions' profile gets; `[]`, none."""
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    """This key's own webhook target (both or neither), instead of COURIER_WEBHOOK_URL's."""

    @model_validator(mode="after")
    def _one_form(self) -> KeyConfig:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key {self.name!r}: give exactly one of key or key_sha256")
        if problem := webhook_problem(self.webhook_url, self.webhook_secret):
            raise ValueError(f"key {self.name!r}: {problem}")
        if self.key is not None and (problem := key_problem(self.key.get_secret_value())):
            raise ValueError(f"key {self.name!r}: " + problem.replace("COURIER_API_KEY", "key"))
        return self


SECRET_FIELDS = (
    "api_key",
    "admin_api_key",
    "metrics_api_key",
    "upstream_api_key",
    "database_url",
    "webhook_secret",
)
"""Settings that may come from a file named by `COURIER_<NAME>_FILE` instead."""


class SecretFileSource(PydanticBaseSettingsSource):
    """`COURIER_API_KEY_FILE=/run/secrets/courier_api_key`: the key is that file's content.

    For Docker/compose secrets and systemd credentials: a key in the environment shows in
    `docker inspect`, in `systemctl show` and in /proc/<pid>/environ to every process of
    the same user, a key in a root-provided file does not. Read once, here, at startup.
    """

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every file at once

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in SECRET_FIELDS:
            env_name = f"COURIER_{name.upper()}"
            path = os.environ.get(f"{env_name}_FILE")
            if not path:
                continue
            if os.environ.get(env_name):
                raise ConfigError(f"set {env_name} or {env_name}_FILE, not both")
            try:
                value = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise ConfigError(f"{env_name}_FILE={path}: cannot read it ({reason})") from None
            # Editors and `echo` add a final newline; the key itself never has one.
            values[name] = value.strip()
        return values


def _toml_path() -> Path | None:
    raw = os.environ.get("COURIER_CONFIG")
    return Path(raw) if raw else None


def config_file_path() -> Path | None:
    """The TOML file settings came from; read once at startup, like the settings."""
    return _toml_path()


class Settings(BaseSettings, WorkSettings):
    """Everything Courier reads from its environment (prefix `COURIER_`) and TOML file."""

    model_config = SettingsConfigDict(env_prefix="COURIER_", frozen=True, extra="ignore")

    api_key: SecretStr = SecretStr("")
    """The bearer key clients must send. Required: at least 16 characters, no placeholder."""
    admin_api_key: SecretStr | None = None
    """Optional second key that may read every session's ledger; same strength rules."""
    metrics_api_key: SecretStr | None = None
    """Optional key whose only scope is reading `/metrics`."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Serve `/metrics` without auth on this loopback-only port as well (0 = off)."""
    host: str = "127.0.0.1"
    port: int = Field(default=8642, ge=0, le=65535)
    data_dir: Path = Path("./data")
    database_url: SecretStr | None = None
    """PostgreSQL for the store (`postgresql+psycopg://user:password@host:5432/courier`;
    `postgresql://` and `postgres://` mean the same driver). Unset: SQLite at
    `data_dir/courier.db`. Secret: it usually carries the password."""
    migrate_on_start: bool = True
    """`courier serve` brings the database schema to this version before it serves; off
    (or `serve --no-migrate`), it refuses a schema that is not current instead."""
    allow_exposed_host_exec: bool = False
    """Permit a non-loopback bind while tools run unsandboxed on the host (dangerous)."""
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    keepalive_s: float = Field(default=5.0, gt=0)
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds a client has to send a complete request head before it is disconnected."""
    http_body_timeout_s: float = Field(default=60.0, gt=0)
    """Seconds a client has to send the whole request body after its head."""
    max_connections_per_ip: int = Field(default=256, ge=0)
    """Open connections per client address (0 = unlimited). Behind a proxy named in
    `trusted_proxies`, the forwarded client's requests in flight are what is counted."""
    trusted_proxies: Annotated[tuple[IPv4Network | IPv6Network, ...], NoDecode] = ()
    """Addresses or networks (CIDR) of reverse proxies whose forwarding header names the
    client; comma-separated or a JSON list. Empty: every header is ignored and the peer is
    the client. A malformed entry refuses the start."""
    trusted_proxy_header: Literal["x-forwarded-for", "forwarded"] = "x-forwarded-for"
    """The one header the trusted proxies set: `X-Forwarded-For` or RFC 7239 `Forwarded`.
    The other is ignored, since a proxy passes on a header it does not set as the client
    wrote it."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """A request line and header block past this many bytes is answered 431 and closed."""
    max_header_fields: int = Field(default=100, ge=8)
    """A request with more header fields than this is answered 431 and closed."""
    upstream_max_connections: int | None = Field(default=None, ge=1)
    """Connections per upstream; None = `max_concurrent_turns`. Never below it: a smaller
    pool would silently queue streams behind each other."""
    upstream_transport: Literal["lean", "httpx"] = "lean"
    """`lean`: upstream HTTP/1.1 on asyncio and httptools (app/providers/transport.py),
    about 2 ms of CPU less per streamed call, on both wires; `httpx`: httpx's own httpcore
    transport (httpcore2 under the SDK built on httpx2), the fallback should an upstream
    ever disagree with the lean one."""
    log_level: str = "info"
    log_format: Literal["text", "json"] = "text"
    """`json`: one JSON object per line with request, session and turn ids, never content."""
    opentelemetry: bool = False
    """FastAPI's OpenTelemetry spans, metrics and logs, for a process whose providers are
    configured (e.g. run under `opentelemetry-instrument`). Off, it costs nothing: on, FastAPI
    looks the providers up on every request even when none is configured."""
    drain_timeout_s: int = Field(default=30, ge=1, le=3600)
    """On SIGTERM, how long open requests may finish before they are cut: 30 s lets a tool
    turn mid-command finish rather than end `interrupted`. A supervisor's stop timeout
    (compose `stop_grace_period`, systemd `TimeoutStopSec`, `docker stop -t`) must be longer."""
    implicit_sessions: bool = True
    """Off: a request without a session id always starts a new session (every profile)."""
    cors_origins: Annotated[tuple[str, ...], NoDecode] = ()
    """Browser origins allowed to call the API (`https://console.example`); empty = no CORS.
    From the environment: a JSON list or a comma-separated string."""
    model_aliases: Annotated[tuple[str, ...], NoDecode] = ()
    """Aliases of the default profile, e.g. `gpt-4o-mini,gpt-4.1`."""
    spend_cap_key_usd: Decimal | None = Field(default=None, ge=0)
    """Total spend allowed per API key, across all its sessions."""
    spend_cap_key_daily_usd: Decimal | None = Field(default=None, ge=0)
    """Spend allowed per API key over any rolling 24 hours."""
    spend_cap_session_usd: Decimal | None = Field(default=None, ge=0)
    """Spend allowed per session."""
    spend_cap_end_user_usd: Decimal | None = Field(default=None, ge=0)
    """Total spend allowed per end user of one API key (see `end_user_headers`)."""
    end_user_headers: Annotated[tuple[str, ...], NoDecode] = ()
    """More request headers naming the app's end user, read after `X-Courier-End-User` and
    before the body's `user`, e.g. Open WebUI's `X-OpenWebUI-User-Id`."""
    session_headers: Annotated[tuple[str, ...], NoDecode] = ()
    """Request headers naming the app's own conversation, e.g. Open WebUI's
    `X-OpenWebUI-Chat-Id`: one Courier session per (key, end user, chat)."""

    # The default profile, from flat env names operators expect.
    upstream_provider: Literal["openai", "anthropic"] = "openai"
    upstream_base_url: str | None = None
    upstream_api_key: SecretStr | None = None
    upstream_model: str = "gpt-4o-mini"
    context_window: int = Field(default=128_000, ge=1024)
    max_output_tokens: int = Field(default=8192, ge=1)
    compaction_threshold: float | None = Field(default=None, gt=0, le=1)
    calibrated_trigger: bool = True
    model_name: str = "courier"
    accept_any_model: bool = False
    workspace: Path | None = None
    """A shared working directory for the default profile; unset = one per session."""
    max_iterations: int = Field(default=90, ge=1, le=10_000)
    terminal_backend: Literal["sandbox", "local"] = "sandbox"
    """Default profile: `local` runs tool commands on the host and forbids an exposed bind."""
    tool_network: bool = False
    workspace_quota_bytes: int = Field(default=GiB, ge=0)
    disk_reserve_bytes: int = Field(default=GiB, ge=0)
    tool_memory_bytes: int = Field(default=2 * GiB, ge=64 * 1024 * 1024)
    tool_cpu_s: int = Field(default=600, ge=1)
    tool_file_size_bytes: int = Field(default=GiB, ge=1024)
    cache_strategy: Literal["planner", "naive", "none"] = "planner"
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    """Default profile: longest silence from the upstream (before the headers, between
    chunks) before the call fails as a timeout."""
    upstream_retry_attempts: int = Field(default=3, ge=1, le=10)
    upstream_retry_base_delay_s: float = Field(default=2.0, ge=0)
    max_continuations: int = Field(default=2, ge=0, le=20)
    upstream_api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    """Default profile: more upstream keys, a JSON list or comma-separated."""
    upstream_key_cooldown_s: float = Field(default=60.0, ge=0)
    profile_kind: ProfileKind = "chat"
    """Default profile's `kind`: `voice` makes `busy` default to `interrupt`."""
    busy: BusyStrategy | None = None
    """Default profile's `X-Courier-Busy` default; None = by `profile_kind`."""
    on_disconnect: DisconnectPolicy = "cancel"
    fallback: Annotated[tuple[str, ...], NoDecode] = ()
    """Default profile: fallback profile names, a JSON list or comma-separated."""

    max_turns_per_end_user: int = Field(default=32, ge=1)
    """Turns one end user of a key (`X-Courier-End-User`, `end_user_headers`, the body's
    `user`) may run at once: an app's users share its key, and one of them must not take
    every turn. Requests naming no end user are not counted; an app that sends one
    constant `user` for everyone is one end user, and should raise this."""
    max_concurrent_tools: int | None = Field(default=None, ge=1)
    """Process-spawning tool calls (terminal) running at once across all turns; more wait
    in arrival order. Unset: by the machine, max(2, min(2 x CPUs, memory // tool memory))."""
    tool_plugins: str = ""
    """Comma-separated `module:attribute` names of extra tools, imported once at startup."""
    mcp_config: Path | None = None
    """MCP servers in the `{"mcpServers": {...}}` file shape (docs/mcp.md); read at start."""
    mcp_url_allow: Annotated[tuple[str, ...], NoDecode] = ()
    """Loopback or private `host:port` entries (or CIDRs) MCP servers' URLs may reach."""
    mcp_call_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    """Longest wait for one MCP tool call unless the server's `timeout_s` says otherwise."""
    mcp_connect_timeout_s: float = Field(default=30.0, gt=0, le=600)
    """Longest wait for an MCP server to start, answer the handshake and list its tools."""
    mcp_remote: bool = True  # a Responses request may name its own MCP server (docs/mcp.md)

    profiles: tuple[Profile, ...] = ()
    """Extra profiles from `[[profiles]]` in the TOML file."""

    # Access control (app/security/): read here once, never again from the environment.
    approvals: str = "on"
    """`off` trusts the agent with dangerous commands (never with the floor or protected
    writes); read once at startup, so changing the environment later changes nothing."""
    approvals_deny: tuple[str, ...] = ()
    """Glob patterns of commands that are refused outright, on every backend."""
    approvals_allow: tuple[str, ...] = ()
    """Glob patterns of commands that skip approval (never for compound commands)."""
    approvals_separate_approver: bool = False
    """The principal whose turn asked may not approve its own call."""
    approval_timeout_s: float = Field(default=120.0, gt=0, le=24 * 3600)
    approvals_unattended: Literal["ask", "deny", "allow"] = "ask"
    keys: tuple[KeyConfig, ...] = ()
    """Extra API keys from `[[keys]]`: name, scopes, limits, caps."""
    max_concurrent_turns: int = Field(default=1024, ge=1)
    """Turns running at once across all principals; more get 429 with Retry-After. A text
    turn costs a stream and a socket, not a process: the default lets 1,000 streams run.
    What consumes the machine (tool processes) has its own cap."""
    replay_memory_mb: int = Field(default=64, ge=1)
    """Memory for finished turns kept for replays (`/events`, a retry that reattaches);
    past it the oldest are forgotten (app/agent/turns/finished.py)."""
    search_index_interval_s: float = Field(default=1.0, ge=0)
    """How often new messages are added to the full-text index, in one batch (0: only
    when a search needs them). A search always sees every message (app/db/search_index.py)."""
    tokens_enabled: bool = False
    """Serve `POST /v1/tokens` and accept the short-lived JWTs it mints."""
    token_secret: SecretStr | None = None
    """HS256 secret for tokens, at least 32 bytes; required when tokens are enabled."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [
            init_settings,
            env_settings,
            SecretFileSource(settings_cls),
        ]
        path = _toml_path()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @field_validator(
        "cors_origins",
        "model_aliases",
        "fallback",
        "upstream_api_keys",
        "end_user_headers",
        "session_headers",
        "mcp_url_allow",
        "webhook_allow_hosts",
        mode="before",
    )
    @classmethod
    def _list(cls, value: Any) -> Any:
        return _split_list(value)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        value = _split_list(value)
        if not isinstance(value, list | tuple):
            return value
        return tuple(trusted_network(str(entry)) for entry in value)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for origin in value:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(f"cors_origins: '{origin}' is not an origin like https://host")
        return tuple(origin.rstrip("/") for origin in value)

    @field_validator("end_user_headers", "session_headers")
    @classmethod
    def _header_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Compared lower-cased, as HTTP compares them; a name with a space or a colon could
        # never arrive as a header, so it is a typo the operator should hear about.
        for name in value:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"'{name}' is not an HTTP header name")
        return tuple(name.lower() for name in value)

    @field_validator("database_url")
    @classmethod
    def _postgresql_url(cls, value: SecretStr | None) -> SecretStr | None:
        url = db_url.normalised(value.get_secret_value()) if value else None
        return SecretStr(url) if url else None

    @field_validator("api_key")
    @classmethod
    def _key_is_strong(cls, value: SecretStr) -> SecretStr:
        problem = key_problem(value.get_secret_value())
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("admin_api_key", "metrics_api_key")
    @classmethod
    def _other_keys_are_strong(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and (problem := key_problem(value.get_secret_value())):
            raise ValueError(problem.replace("COURIER_API_KEY", "this key"))
        return value

    @model_validator(mode="after")
    def _bind_is_safe(self) -> Settings:
        host_exec = [p.name for p in self.all_profiles() if p.terminal_backend == "local"]
        if not is_loopback(self.host) and host_exec and not self.allow_exposed_host_exec:
            raise ValueError(
                f"refusing to bind {self.host}: profile(s) {', '.join(host_exec)} run commands "
                "on this host without a sandbox, so a reachable endpoint would be remote code "
                'execution; bind 127.0.0.1, use terminal_backend = "sandbox", or set '
                "COURIER_ALLOW_EXPOSED_HOST_EXEC=1 if you accept that risk"
            )
        pool = self.upstream_max_connections
        if pool is not None and pool < self.max_concurrent_turns:
            raise ValueError(
                f"COURIER_UPSTREAM_MAX_CONNECTIONS={pool} is below "
                f"COURIER_MAX_CONCURRENT_TURNS={self.max_concurrent_turns}: turns past the "
                "pool size would wait for a connection with no error; raise it or lower the "
                "turn limit"
            )
        names = [p.name for p in self.all_profiles()]
        if len(names) != len(set(names)):
            raise ValueError(f"profile names must be unique, got {names}")
        for p in self.all_profiles():
            unknown = [n for n in p.fallback if n not in names or n == p.name]
            if unknown:
                raise ValueError(f"profile {p.name}: fallback names unknown profiles {unknown}")
        if self.approvals.strip().lower() not in ("on", "off", "true", "false", "1", "0"):
            raise ValueError("COURIER_APPROVALS must be on or off")
        key_names = [k.name for k in self.keys]
        if len(key_names) != len(set(key_names)) or set(key_names) & RESERVED_KEY_NAMES:
            raise ValueError(
                f"key names must be unique and not one of {sorted(RESERVED_KEY_NAMES)}"
            )
        if (problem := webhook_problem(self.webhook_url, self.webhook_secret)) is not None:
            raise ValueError(f"refusing to start: {problem}")
        if self.tokens_enabled:
            secret = self.token_secret.get_secret_value() if self.token_secret else ""
            if len(secret.encode()) < MIN_TOKEN_SECRET_BYTES:
                raise ValueError(
                    "refusing to start: tokens_enabled needs COURIER_TOKEN_SECRET of at least "
                    f"{MIN_TOKEN_SECRET_BYTES} bytes (run `courier keygen` for one)"
                )
        return self

    def default_profile(self) -> Profile:
        return Profile(
            name=self.model_name,
            provider=self.upstream_provider,
            base_url=self.upstream_base_url,
            api_key=self.upstream_api_key,
            model=self.upstream_model,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            compaction_threshold=self.compaction_threshold,
            calibrated_trigger=self.calibrated_trigger,
            accept_any_model=self.accept_any_model,
            workspace=self.workspace,
            max_iterations=self.max_iterations,
            upstream_timeout_s=self.upstream_timeout_s,
            retry_attempts=self.upstream_retry_attempts,
            retry_base_delay_s=self.upstream_retry_base_delay_s,
            max_continuations=self.max_continuations,
            fallback=self.fallback,
            kind=self.profile_kind,
            busy=self.busy,
            on_disconnect=self.on_disconnect,
            api_keys=self.upstream_api_keys,
            key_cooldown_s=self.upstream_key_cooldown_s,
            terminal_backend=self.terminal_backend,
            network=self.tool_network,
            workspace_quota_bytes=self.workspace_quota_bytes,
            disk_reserve_bytes=self.disk_reserve_bytes,
            tool_memory_bytes=self.tool_memory_bytes,
            tool_cpu_s=self.tool_cpu_s,
            tool_file_size_bytes=self.tool_file_size_bytes,
            cache_strategy=self.cache_strategy,
            approval_timeout_s=self.approval_timeout_s,
            unattended=self.approvals_unattended,
            aliases=self.model_aliases,
        )

    def upstream_pool_size(self) -> int:
        return self.upstream_max_connections or self.max_concurrent_turns

    def all_profiles(self) -> tuple[Profile, ...]:
        return (self.default_profile(), *self.profiles)

    def tool_plugin_specs(self) -> list[str]:
        return [spec.strip() for spec in self.tool_plugins.split(",") if spec.strip()]

    @property
    def db_path(self) -> Path:
        return self.data_dir / "courier.db"


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_list(value: Any) -> Any:
    """A list setting from the environment: a JSON list or a comma-separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return value


def load_settings(**overrides: Any) -> Settings:
    """Build settings once; a refusal comes back as `ConfigError` with a single clear line."""
    from pydantic import ValidationError

    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first.get("msg", "invalid configuration")).removeprefix("Value error, ")
        where = ".".join(str(p) for p in first.get("loc", ()))
        if where and where != "api_key" and not message.startswith("refusing"):
            message = f"{where}: {message}"
        raise ConfigError(message) from None
