"""`courier doctor`: check a deployment before (or while) it serves, and say what to fix.

Each check returns findings of three levels: ok, warn (works, but an operator should know)
and fail (unsafe or broken). Any fail makes the exit status 1, so a deploy script or a
container's pre-start hook can gate on it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from app.agent.cost.spend_caps import price_override
from app.config import (
    ConfigError,
    Profile,
    Settings,
    is_loopback,
    key_problem,
    load_settings,
    upstream_problem,
)
from app.providers.pricing import price_usage
from app.providers.usage import Usage
from app.security.ssrf import SSRFError, resolve_and_check
from app.tools.mcp.config import configured
from app.tools.mcp.launch import SERVER_PATH
from app.tools.sandbox.process import in_container, sandbox_status

Level = Literal["ok", "warn", "fail"]
MIN_FREE_BYTES = 200 * 1024 * 1024
"""Below this the database can fail mid-transaction (SQLite needs room for its WAL)."""
LOW_FREE_BYTES = 2 * 1024 * 1024 * 1024
STRONG_KEY_CHARS = 32


@dataclass(frozen=True, slots=True)
class Finding:
    level: Level
    check: str
    message: str


def check_keys(settings: Settings) -> Iterable[Finding]:
    for name, secret in (
        ("api key", settings.api_key),
        ("admin key", settings.admin_api_key),
        ("metrics key", settings.metrics_api_key),
    ):
        if secret is None:
            continue
        key = secret.get_secret_value()
        if problem := key_problem(key):
            yield Finding("fail", name, problem)
        elif len(key) < STRONG_KEY_CHARS or len(set(key)) < 12:
            yield Finding(
                "warn",
                name,
                f"{len(key)} characters, {len(set(key))} distinct: guessable in bulk; "
                "`courier keygen` makes a 43-character random one",
            )
        else:
            yield Finding("ok", name, f"{len(key)} characters")
    keys = [s.get_secret_value() for s in (settings.api_key, settings.admin_api_key) if s]
    if len(keys) == 2 and keys[0] == keys[1]:
        yield Finding("fail", "admin key", "the admin key equals the API key: give it its own")


def check_bind(settings: Settings) -> Iterable[Finding]:
    where = f"{settings.host}:{settings.port}"
    host_exec = [p.name for p in settings.all_profiles() if p.terminal_backend == "local"]
    if is_loopback(settings.host):
        yield Finding("ok", "bind", f"{where}, loopback only")
    elif host_exec and settings.allow_exposed_host_exec:
        yield Finding(
            "fail",
            "bind",
            f"{where} is reachable from the network while profile(s) {', '.join(host_exec)} "
            "run commands on the host unsandboxed: that is remote code execution for anyone "
            "with the key; bind 127.0.0.1 or use the sandbox backend",
        )
    elif in_container():
        yield Finding(
            "ok",
            "bind",
            f"{where} inside a container: exposure is the published port; publish on "
            "127.0.0.1 (deploy/docker-compose.yml) and put TLS in front",
        )
    else:
        yield Finding(
            "warn",
            "bind",
            f"{where} is reachable from the network without TLS; bind 127.0.0.1 and put "
            "a TLS proxy in front (deploy/nginx.conf)",
        )


def _userns_note() -> str:
    notes = []
    for path in (
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/user/max_user_namespaces",
    ):
        try:
            value = Path(path).read_text().strip()
        except OSError:
            continue
        if value == "0":
            notes.append(f"{path} is 0 (user namespaces are off: set it to 1)")
    apparmor = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if apparmor.exists() and apparmor.read_text().strip() == "1":
        notes.append(
            "AppArmor restricts unprivileged user namespaces (Ubuntu 24.04): add a profile "
            "for bwrap or set kernel.apparmor_restrict_unprivileged_userns=0"
        )
    return "; ".join(notes)


def check_sandbox(settings: Settings) -> Iterable[Finding]:
    sandboxed = [p.name for p in settings.all_profiles() if p.terminal_backend == "sandbox"]
    if not sandboxed:
        yield Finding("ok", "sandbox", "no profile uses the sandboxed terminal")
        return
    status = sandbox_status()
    if status.profile is None:
        detail = status.reason
        if note := _userns_note():
            detail += f"; {note}"
        yield Finding(
            "fail", "sandbox", f"the terminal tool is off for {', '.join(sandboxed)}: {detail}"
        )
    elif status.missing:
        yield Finding("warn", "sandbox", "bubblewrap runs, reduced: " + "; ".join(status.missing))
    else:
        yield Finding("ok", "sandbox", "bubblewrap with user namespaces: full profile")


def check_data_dir(settings: Settings) -> Iterable[Finding]:
    data = settings.data_dir.resolve()
    probe_dir = data if data.exists() else next(p for p in data.parents if p.exists())
    if not data.exists():
        if not os.access(probe_dir, os.W_OK | os.X_OK):
            yield Finding(
                "fail", "data dir", f"{data} does not exist and {probe_dir} is not writable"
            )
            return
        yield Finding("ok", "data dir", f"{data} will be created at first start")
    else:
        try:
            with tempfile.NamedTemporaryFile(dir=data, prefix=".doctor-"):
                pass
        except OSError as exc:
            yield Finding("fail", "data dir", f"{data} is not writable: {exc.strerror}")
            return
        mode = data.stat().st_mode
        if mode & stat.S_IWOTH:
            yield Finding("fail", "data dir", f"{data} is world-writable: chmod 700 {data}")
        elif mode & (stat.S_IRWXG | stat.S_IRWXO):
            yield Finding(
                "warn",
                "data dir",
                f"{data} is mode {stat.S_IMODE(mode):o}: transcripts and keys' ledgers are "
                f"readable by other users; chmod 700 {data}",
            )
        else:
            yield Finding("ok", "data dir", f"{data}, mode {stat.S_IMODE(mode):o}")
    free = shutil.disk_usage(probe_dir).free
    size = f"{free / 2**30:.1f} GiB free"
    if free < MIN_FREE_BYTES:
        yield Finding("fail", "disk", f"{size} under {probe_dir}: free space before serving")
    elif free < LOW_FREE_BYTES:
        yield Finding("warn", "disk", f"{size} under {probe_dir}")
    else:
        yield Finding("ok", "disk", size)


def _models_url(profile: Profile) -> tuple[str, dict[str, str]]:
    key = profile.api_key.get_secret_value() if profile.api_key else ""
    if profile.provider == "anthropic":
        base = (profile.base_url or "https://api.anthropic.com").rstrip("/")
        return f"{base}/v1/models", {"x-api-key": key, "anthropic-version": "2023-06-01"}
    base = (profile.base_url or "https://api.openai.com/v1").rstrip("/")
    return f"{base}/models", {"Authorization": f"Bearer {key}"}


def check_mcp_file(settings: Settings) -> Iterable[Finding]:
    """The MCP servers file: parsed as `courier serve` parses it, each stdio command on the
    PATH its server gets, each HTTP server's address allowed by the egress policy."""
    try:
        mcp = configured(settings)
    except ConfigError as exc:
        yield Finding("fail", "mcp", str(exc))
        return
    if mcp is None:
        return
    if mcp.secrets() and mcp.path.stat().st_mode & 0o077:
        yield Finding(
            "warn", "mcp", f"{mcp.path} holds env or header values and others may read it"
        )
    for server in mcp.servers:
        name = f"mcp {server.name}"
        if server.unknown_keys:
            yield Finding("warn", name, f"unknown keys ignored: {', '.join(server.unknown_keys)}")
        if server.transport == "stdio":
            path = dict(server.env).get("PATH", SERVER_PATH)
            found = shutil.which(server.command, path=path)
            if found is None:
                yield Finding("fail", name, f"command {server.command!r} not found on {path}")
            else:
                yield Finding("ok", name, f"stdio, {found}")
            continue
        url = httpx.URL(server.url)
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            asyncio.run(resolve_and_check(url.host, port, allow=settings.mcp_url_allow))
        except SSRFError as exc:
            yield Finding(
                "fail", name, f"{exc} (allow it with COURIER_MCP_URL_ALLOW={url.host}:{port})"
            )
        else:
            yield Finding("ok", name, f"http, {url.host}:{port}")


def check_upstream_config(settings: Settings) -> Iterable[Finding]:
    """What `courier serve` refuses: a profile with neither an upstream key nor a base URL."""
    if problem := upstream_problem(settings):
        yield Finding("fail", "upstream", problem.removeprefix("refusing to start: "))


def check_upstreams(
    settings: Settings, *, get: Callable[..., httpx.Response] = httpx.get
) -> Iterable[Finding]:
    for profile in settings.all_profiles():
        name = f"upstream {profile.name}"
        url, headers = _models_url(profile)
        try:
            response = get(url, headers=headers, timeout=5.0)
        except httpx.HTTPError as exc:
            yield Finding("fail", name, f"{url} is unreachable: {type(exc).__name__}: {exc}")
        else:
            if response.status_code in (401, 403):
                yield Finding(
                    "fail", name, f"{url} refuses the upstream key (HTTP {response.status_code})"
                )
            elif response.status_code >= 500:
                yield Finding("warn", name, f"{url} answers HTTP {response.status_code}")
            else:
                yield Finding("ok", name, f"{url} reachable")
        yield from _check_price(profile)


def _check_price(profile: Profile) -> Iterable[Finding]:
    name = f"price {profile.name}"
    cost = price_usage(
        Usage(input_tokens=1_000, output_tokens=1_000),
        model=profile.model,
        provider=profile.provider,
        override=price_override(profile),
    )
    if cost.status != "unknown":
        yield Finding("ok", name, f"{profile.model}: {cost.status} from {cost.source}")
    elif profile.allow_unpriced:
        yield Finding("warn", name, f"{profile.model} has no known price (allow_unpriced is on)")
    else:
        yield Finding(
            "fail",
            name,
            f"{profile.model} has no known price, so costs read `unknown` and spend caps "
            "refuse its turns; set [profiles.prices] or allow_unpriced",
        )


def run(*, upstream: bool = True) -> tuple[list[Finding], int]:
    """All findings and the exit status: 0 when nothing failed, 1 otherwise."""
    try:
        settings = load_settings()
    except ConfigError as exc:
        return [Finding("fail", "config", str(exc))], 1
    findings = [
        *check_keys(settings),
        *check_bind(settings),
        *check_sandbox(settings),
        *check_data_dir(settings),
        *check_upstream_config(settings),
        *check_mcp_file(settings),
    ]
    if upstream:
        findings += check_upstreams(settings)
    return findings, int(any(f.level == "fail" for f in findings))


def render(findings: list[Finding]) -> str:
    marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
    lines = [f"{marks[f.level]}  {f.check}: {f.message}" for f in findings]
    failed = [f for f in findings if f.level == "fail"]
    if failed:
        lines += ["", f"{len(failed)} problem(s) to fix:"]
        lines += [f"  - {f.check}: {f.message}" for f in failed]
    else:
        lines += ["", "no problems found"]
    return "\n".join(lines)
