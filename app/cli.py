"""The `courier` command: serve, simulate, keygen."""

from __future__ import annotations

import argparse
import secrets
import sys


def _serve(_args: argparse.Namespace) -> int:
    import uvicorn

    from app import logs
    from app.config import ConfigError, load_settings
    from app.main import create_app
    from app.tools.plugins import PluginError, load_plugin_tools

    try:
        settings = load_settings()
        load_plugin_tools(settings.tool_plugin_specs())
    except (ConfigError, PluginError) as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # Ours instead (routes/request_log.py): uvicorn's line carries the query string.
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=settings.drain_timeout_s,
    )
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
