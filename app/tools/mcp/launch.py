"""How a stdio MCP server is started: its environment built from nothing, its home under
the data directory, resource limits, and where its stderr goes.

The environment is the point. The SDK would hand a server HOME, PATH, USER and friends
from Courier's own environment, and a careless launcher would hand it everything,
including COURIER_API_KEY and the upstream keys: a server (third-party code) could then
read Courier's secrets from its own environment. Here every name the SDK would inherit is
overridden, and the rest is only what the file gives that server.

The limits are those of tool commands (no core dumps, the profile's file size and
memory), applied with prlimit before the server starts so it cannot raise them. There is
no CPU limit: RLIMIT_CPU counts a process's whole life, so a long-lived server would be
killed after its budget; a hung call is bounded by the call timeout instead. The argv is
written here rather than taken from app/tools/sandbox/process.py, whose prefix carries
that CPU limit and cgroups made and removed around each command.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from app.tools.mcp.config import ServerConfig
from app.tools.sandbox.policy import SANDBOX_PATH

SERVER_PATH = SANDBOX_PATH
"""The PATH a server gets unless its entry sets one."""
MAX_STDERR_BYTES = 1 << 20
JS_RUNTIMES = frozenset({"node", "nodejs", "npx", "bun", "bunx", "deno"})
"""V8 reserves far more address space than it uses, so RLIMIT_AS would stop it starting."""


@dataclass(frozen=True, slots=True)
class Limits:
    memory_bytes: int
    file_size_bytes: int


@dataclass(frozen=True, slots=True)
class Launch:
    """What the SDK's stdio transport is given: argv, env and working directory."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: Path


class CommandNotFound(Exception):
    pass


def server_home(data_dir: Path, name: str) -> Path:
    return data_dir / "mcp" / name


def launch(config: ServerConfig, *, data_dir: Path, limits: Limits | None) -> Launch:
    """The server's argv and environment; CommandNotFound when its command is not on the
    PATH it will run with."""
    home = server_home(data_dir, config.name) / "home"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    home.chmod(0o700)
    env = {
        "PATH": SERVER_PATH,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "SHELL": "/bin/sh",
        "USER": "courier-mcp",
        "LOGNAME": "courier-mcp",
        **dict(config.env),
    }
    command = shutil.which(config.command, path=env["PATH"])
    if command is None:
        raise CommandNotFound(f"command {config.command!r} not found on PATH={env['PATH']}")
    argv = [command, *config.args]
    prlimit = shutil.which("prlimit", path=SERVER_PATH)
    if limits is not None and prlimit is not None:
        prefix = [prlimit, "--core=0:0", f"--fsize={limits.file_size_bytes}"]
        if Path(config.command).name not in JS_RUNTIMES:
            prefix.append(f"--as={limits.memory_bytes}")
        argv = [*prefix, "--", *argv]
    cwd = Path(config.cwd) if config.cwd else home
    return Launch(command=argv[0], args=tuple(argv[1:]), env=env, cwd=cwd)


def stderr_log(data_dir: Path, name: str) -> IO[str]:
    """The server's stderr, kept apart from Courier's: a server may print its own secrets.
    Owner-only, appended, and started afresh past 1 MiB (at a connect)."""
    path = server_home(data_dir, name) / "stderr.log"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        if path.stat().st_size > MAX_STDERR_BYTES:
            path.replace(path.with_suffix(".log.1"))
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return open(fd, "a", encoding="utf-8", errors="replace")
