"""The `courier` command: serve, simulate, keygen."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys


def _serve(_args: argparse.Namespace) -> int:
    import uvicorn

    from app.config import ConfigError, load_settings
    from app.main import create_app
    from app.tools.plugins import PluginError, load_plugin_tools

    try:
        settings = load_settings()
        load_plugin_tools(settings.tool_plugin_specs())
    except (ConfigError, PluginError) as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from app.drain import DrainingServer

    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # SIGTERM: open requests get the drain timeout to finish their turns.
        timeout_graceful_shutdown=max(int(settings.drain_timeout_s), 1),
    )
    DrainingServer(config, app).run()
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
