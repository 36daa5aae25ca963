"""The `courier` command: serve, simulate, keygen."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys


def _serve(_args: argparse.Namespace) -> int:
    from app.config import ConfigError, load_settings
    from app.db.instance import DataDirBusy, DataDirLock

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    try:
        # Before the heavy imports, so a refused second server says so at once. Held until
        # the process exits; the kernel releases it even on SIGKILL.
        lock = DataDirLock.acquire(settings.data_dir)
    except DataDirBusy as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 3

    import uvicorn

    from app.main import create_app
    from app.protocol.connection_guard import ConnectionLimits, guarded_httptools_protocol
    from app.tools.plugins import PluginError, load_plugin_tools

    try:
        load_plugin_tools(settings.tool_plugin_specs())
    except PluginError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    limits = ConnectionLimits(
        header_timeout_s=settings.http_header_timeout_s,
        body_timeout_s=settings.http_body_timeout_s,
        max_per_ip=settings.max_connections_per_ip,
    )
    # httpx logs every upstream request at INFO: a formatted line per call on the event
    # loop that the per-turn line (`courier.turn`) already covers.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    uvicorn.run(
        create_app(settings),
        http=guarded_httptools_protocol(limits),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=5,
        # The lean stack: uvloop and httptools cost about 2.4 ms less CPU per request than
        # asyncio and h11, and the access log (a formatted line per request, on the event
        # loop) gives way to one structured line per turn (`app.agent.turn_log`).
        loop="uvloop",
        access_log=False,
    )
    lock.release()
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from app.simulator.server import run

    run(args.host, args.port)
    return 0


def _keygen(_args: argparse.Namespace) -> int:
    print("sk-courier-" + secrets.token_urlsafe(32))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="courier", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the OpenAI-compatible agent server").set_defaults(func=_serve)
    sim = sub.add_parser("simulate", help="run the upstream model simulator")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8643)
    sim.set_defaults(func=_simulate)
    sub.add_parser("keygen", help="print a strong random API key").set_defaults(func=_keygen)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
