"""The `courier` command: serve, simulate, keygen, and the operator commands in app/ops/."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from app.config import Settings


def _serve(args: argparse.Namespace) -> int:
    from app.config import ConfigError, load_settings
    from app.db.instance import DataDirBusy, DataDirLock

    try:
        # --no-migrate wins over COURIER_MIGRATE_ON_START, for the lifespan's store too.
        settings = load_settings(**({"migrate_on_start": False} if args.no_migrate else {}))
    except ConfigError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    if problem := _start_problem(settings):
        print(f"courier: {problem}", file=sys.stderr)
        return 2
    try:
        # Before the heavy imports, so a refused second server says so at once. Held until
        # the process exits; the kernel releases it even on SIGKILL.
        lock = DataDirLock.acquire(settings.data_dir)
    except DataDirBusy as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 3

    from app.observe import logs
    from app.ops.drain import DrainingServer
    from app.ops.open_files import needed_for, raise_open_files
    from app.tools.plugins import PluginError, load_plugin_tools

    try:
        load_plugin_tools(settings.tool_plugin_specs())
    except PluginError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    if problem := _schema_problem(settings):
        print(f"courier: {problem}", file=sys.stderr)
        lock.release()
        return 2
    raise_open_files(needed_for(settings.max_concurrent_turns))
    # httpx logs every upstream request at INFO: a formatted line per call on the event
    # loop that the per-turn line (`courier.turn`) already covers.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    config, app = _server_config(settings)
    # SIGTERM marks the turn manager draining: no new turns, cut-off ones `interrupted`.
    DrainingServer(config, app).run()
    lock.release()
    return 0


def _start_problem(settings: Settings) -> str | None:
    """What refuses the start in one line before anything heavy is imported: no upstream to
    talk to, or a broken MCP servers file."""
    from app.config import ConfigError, upstream_problem
    from app.tools.mcp.config import configured

    if problem := upstream_problem(settings):
        return problem
    try:
        configured(settings)
    except ConfigError as exc:
        return str(exc)
    return None


def _schema_problem(settings: Settings) -> str | None:
    """Bring the database schema to this version (or, told not to, check it is there)
    before serving: a refusal here is one line and exit 2, not a traceback from the
    lifespan."""
    from sqlalchemy.exc import OperationalError

    from app.db.database import database, kind, open_engine
    from app.db.migrations import runner

    engine = open_engine(database(settings))
    try:
        if not settings.migrate_on_start:
            runner.check(engine)
        elif (moved := runner.upgrade(engine))[0] != "current":
            logging.getLogger("courier.migrate").info(
                "database schema %s -> %s (revision %s)", *moved, runner.head()
            )
    except runner.SchemaError as exc:
        return str(exc)
    except OperationalError as exc:
        # The driver's own words: they name the host, never the password.
        return f"cannot open the {kind(database(settings))} database: {exc.orig}"
    finally:
        engine.dispose()
    return None


def _migrate(args: argparse.Namespace) -> int:
    """`courier migrate [--check]`: the schema's state before and after, exit 0 when it
    is current; --check only reads it (exit 1 unless current)."""
    from sqlalchemy.exc import OperationalError

    from app.config import ConfigError, load_settings
    from app.db.database import database, kind, open_engine
    from app.db.instance import DataDirBusy, DataDirLock
    from app.db.migrations import runner

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 2
    backend = kind(database(settings))
    lock = None
    try:
        if backend == "sqlite":
            # One process owns a SQLite file: migrating under a running server is refused.
            lock = DataDirLock.acquire(settings.data_dir)
        engine = open_engine(database(settings))
        try:
            with engine.connect() as conn:
                state, revision = runner.schema_state(conn)
            print(
                f"database ({backend}): {state}" + (f" at revision {revision}" if revision else "")
            )
            if state == "ahead":
                raise runner.too_new(revision)
            if args.check:
                return 0 if state == "current" else 1
            after = runner.upgrade(engine)[1]
            print(f"database ({backend}): {after} at revision {runner.head()}")
        finally:
            engine.dispose()
    except DataDirBusy as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 3
    except runner.SchemaError as exc:
        print(f"courier: {exc}", file=sys.stderr)
        return 1
    except OperationalError as exc:
        print(f"courier: cannot open the {backend} database: {exc.orig}", file=sys.stderr)
        return 2
    finally:
        if lock is not None:
            lock.release()
    return 0


def _server_config(settings: Settings) -> tuple[uvicorn.Config, FastAPI]:
    """uvicorn's configuration for the app, behind the connection guard (and the trusted
    proxies' forwarding headers when there are any)."""
    import uvicorn
    from starlette.types import ASGIApp

    from app.api.http.connection_guard import ConnectionLimits, guarded_httptools_protocol
    from app.api.http.forwarded import ForwardedClients, TrustedProxies
    from app.main import create_app

    trusted = TrustedProxies(settings.trusted_proxies, settings.trusted_proxy_header)
    limits = ConnectionLimits(
        header_timeout_s=settings.http_header_timeout_s,
        body_timeout_s=settings.http_body_timeout_s,
        max_per_ip=settings.max_connections_per_ip,
        max_header_bytes=settings.max_header_bytes,
        max_header_fields=settings.max_header_fields,
        trusted=trusted,
    )
    app = create_app(settings)
    served: ASGIApp = app
    if settings.trusted_proxies:
        served = ForwardedClients(app, trusted, max_per_ip=settings.max_connections_per_ip)
    config = uvicorn.Config(
        served,
        http=guarded_httptools_protocol(limits),
        # Forwarding headers are app/api/http/forwarded.py's, from COURIER_TRUSTED_PROXIES
        # only: uvicorn's own reader trusts 127.0.0.1 unasked and FORWARDED_ALLOW_IPS from
        # the environment at any time.
        proxy_headers=False,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=settings.drain_timeout_s,
        # The lean stack: uvloop and httptools cost about 2.4 ms less CPU per request than
        # asyncio and h11, and the access log (a formatted line per request, on the event
        # loop, carrying the query string) gives way to one structured line per turn
        # (`app.agent.turns.log`), plus api/http/request_log.py's line in JSON mode.
        loop="uvloop",
        access_log=False,
        log_config=None,
    )
    return config, app


def _simulate(args: argparse.Namespace) -> int:
    from app.simulator.server import run

    run(args.host, args.port)
    return 0


def _keygen(_args: argparse.Namespace) -> int:
    print("sk-courier-" + secrets.token_urlsafe(32))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from app.ops import doctor

    findings, status = doctor.run(upstream=not args.skip_upstream)
    print(doctor.render(findings))
    return status


def _mint(args: argparse.Namespace) -> int:
    from app.ops.mint_token import mint

    return mint(args)


def _records(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from app.db.operator_store import StoreMissing
        from app.ops import records

        try:
            result: int = getattr(records, name)(args)
        except StoreMissing as exc:
            return records.store_missing(exc)
        return result

    return run


def _add_records(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def store_args(p: argparse.ArgumentParser, *, json_out: bool = True) -> None:
        p.add_argument("--data-dir", help="default: COURIER_DATA_DIR, else the configured one")
        if json_out:
            p.add_argument("--json", action="store_true", help="machine-readable output")

    sessions = sub.add_parser("sessions", help="list, show, search or export stored sessions")
    verbs = sessions.add_subparsers(dest="verb", required=True)
    ls = verbs.add_parser("list", help="newest started first")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--owner", help="only this key's sessions (its `key_...` id)")
    ls.add_argument("--after", metavar="SESSION", help="the page after this session (paging)")
    store_args(ls)
    ls.set_defaults(func=_records("sessions_list"))
    show = verbs.add_parser("show", help="a session's record and every message row")
    show.add_argument("session_id")
    store_args(show)
    show.set_defaults(func=_records("sessions_show"))
    search = verbs.add_parser("search", help="full-text search across sessions")
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=20)
    store_args(search)
    search.set_defaults(func=_records("sessions_search"))
    export = verbs.add_parser("export", help="a session as JSON Lines on stdout")
    export.add_argument("session_id")
    store_args(export, json_out=False)
    export.set_defaults(func=_records("sessions_export"))

    usage = sub.add_parser("usage", help="spend by day, key and profile")
    usage.add_argument("--days", type=int, default=0, help="only the last N days (0: all)")
    store_args(usage)
    usage.set_defaults(func=_records("usage"))

    tokens = sub.add_parser("tokens", help="short-lived tokens")
    token_verbs = tokens.add_subparsers(dest="verb", required=True)
    mint = token_verbs.add_parser("mint", help="mint a token with the server's secret")
    mint.add_argument("--key", default="default", help="the key the token stands for, by name")
    mint.add_argument(
        "--scope", action="append", help="a scope to grant (repeatable; default: chat)"
    )
    mint.add_argument("--ttl", type=int, default=900, help="seconds until it expires (max 3600)")
    mint.add_argument("--session", help="bind the token to this session id")
    mint.add_argument("--json", action="store_true", help="token, expiry and scopes as JSON")
    mint.set_defaults(func=_mint)

    keys = sub.add_parser("keys", help="key utilities")
    key_verbs = keys.add_subparsers(dest="verb", required=True)
    key_verbs.add_parser(
        "hash", help="read a key on stdin, print its sha256 digest and owner id"
    ).set_defaults(func=_records("keys_hash"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="courier", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the OpenAI-compatible agent server")
    serve.add_argument(
        "--no-migrate",
        action="store_true",
        help="refuse a database schema that is not current instead of upgrading it",
    )
    serve.set_defaults(func=_serve)
    migrate = sub.add_parser("migrate", help="bring the database schema to this version")
    migrate.add_argument(
        "--check", action="store_true", help="only report the state; exit 1 unless current"
    )
    migrate.set_defaults(func=_migrate)
    sim = sub.add_parser("simulate", help="run the upstream model simulator")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8643)
    sim.set_defaults(func=_simulate)
    sub.add_parser("keygen", help="print a strong random API key").set_defaults(func=_keygen)
    doctor = sub.add_parser("doctor", help="check this deployment and list what to fix")
    doctor.add_argument(
        "--skip-upstream", action="store_true", help="do not contact the upstream providers"
    )
    doctor.set_defaults(func=_doctor)
    _add_records(sub)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
