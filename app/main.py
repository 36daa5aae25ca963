"""create_app(settings): the FastAPI application, with everything built in the lifespan.

Nothing is built at import time, so tests can create apps with their own settings.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.telemetry import TelemetryConfig
from prometheus_client import start_http_server
from pydantic import SecretStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.agent.approvals import ApprovalGate, ApprovalPolicy
from app.agent.turns.manager import TurnManager
from app.agent.turns.recovery import repair_interrupted_turns
from app.api.admin import approvals as approval_routes
from app.api.admin import mcp as mcp_routes
from app.api.admin import metrics as metrics_routes
from app.api.admin import openapi, tokens, usage
from app.api.admin.console import router as console
from app.api.chat import router as chat
from app.api.chat.serving import ChatServing
from app.api.discovery import capabilities, health, models
from app.api.http.cors import CorsMiddleware
from app.api.http.direct import DirectApp
from app.api.http.errors import ApiError, validation_error
from app.api.http.head import HeadAsGet
from app.api.http.request_log import RequestLogMiddleware
from app.api.http.security_headers import SECURITY_HEADERS, SecurityHeaders
from app.api.jobs import router as jobs_routes
from app.api.jobs.service import install_jobs
from app.api.responses import router as responses
from app.api.responses.background import BackgroundRuns
from app.api.responses.background import repair_unfinished as repair_unfinished_background
from app.api.responses.remote_mcp import RemoteMcp
from app.api.responses.serving import ResponsesServing
from app.api.retries import DurableKeys
from app.api.sessions import router as sessions
from app.api.sessions import turns as turn_routes
from app.api.sessions.service import SessionService
from app.api.state import AppState
from app.api.turn_serving import TurnServing
from app.config import Settings
from app.db.approval_store import ApprovalStore
from app.db.database import database, database_password
from app.db.idempotency_store import IdempotencyStore
from app.db.instance import holder_alive
from app.db.key_store import KeyStateStore
from app.db.stats import count_db_work
from app.db.store import Store
from app.observe.metrics import Metrics
from app.providers.base import Provider
from app.providers.clients import UpstreamClients
from app.providers.factory import DEFAULT_BASE_URLS, build_keyed_provider
from app.providers.keyring import KeyStates
from app.providers.pricing import load_price_table
from app.security.auth import Authenticator
from app.security.minted_tokens import TokenIssuer
from app.security.outbound import OutboundScan
from app.security.rate_limits import Limits
from app.security.redact import install as install_redaction
from app.tools.builtin import builtin_tools
from app.tools.capacity import ToolSlots, machine_slots
from app.tools.mcp.config import configured
from app.tools.plugins import load_plugin_tools
from app.tools.registry import ToolRegistry
from app.tools.sandbox.process import sandbox_status
from app.webhooks.dispatcher import Target, Webhooks

if TYPE_CHECKING:
    from app.tools.mcp.hub import McpHub

log = logging.getLogger(__name__)


def build_providers(
    settings: Settings, clients: UpstreamClients, key_states: KeyStates
) -> dict[str, Provider]:
    providers: dict[str, Provider] = {}
    # The last line: every body is searched for these before it is sent upstream.
    outbound = OutboundScan(known_secrets(settings))
    for profile in settings.all_profiles():
        base_url = profile.base_url or DEFAULT_BASE_URLS[profile.provider]
        providers[profile.name] = build_keyed_provider(
            profile,
            key_states,
            base_url=base_url,
            clients=clients,
            outbound=outbound,
        )
    return providers


def build_authenticator(settings: Settings) -> Authenticator:
    tokens = None
    if settings.tokens_enabled and settings.token_secret is not None:
        tokens = TokenIssuer(settings.token_secret.get_secret_value())
    return Authenticator(
        settings.api_key,
        admin_key=settings.admin_api_key,
        metrics_key=settings.metrics_api_key,
        keys=settings.keys,
        tokens=tokens,
    )


def build_gate(settings: Settings, store: Store, auth: Authenticator) -> ApprovalGate:
    approval_store = ApprovalStore(store.engine)
    # A pending approval of a dead process has nobody waiting on it: close it, so a
    # decision that arrives now gets 409 instead of silently approving nothing.
    if abandoned := approval_store.abandon_pending():
        log.warning("closed %d approval(s) left pending by a previous process", abandoned)
    policy = ApprovalPolicy.from_settings(settings)
    if policy.bypass:
        log.warning(
            "COURIER_APPROVALS=off: dangerous commands run without asking; the floor, "
            "deny globs and protected writes still hold"
        )
    return ApprovalGate(approval_store, policy, names={p.owner: p.label for p in auth.principals()})


def known_secrets(settings: Settings) -> list[str]:
    """Every credential the process holds, for the log and error redactor and the scan of
    upstream bodies. A key configured only by its hash (`key_sha256`) is not known here."""
    values = [settings.api_key, settings.admin_api_key, settings.metrics_api_key]
    values += [settings.upstream_api_key, settings.token_secret, settings.webhook_secret]
    values += [p.api_key for p in settings.profiles]
    values += [k for p in settings.all_profiles() for k in p.api_keys]
    values += [k.key for k in settings.keys] + [k.webhook_secret for k in settings.keys]
    values.append(database_password(settings))
    # The MCP servers' env and header values: a server echoing its own token into a
    # result must not send it upstream.
    mcp = configured(settings)
    return [v.get_secret_value() for v in values if v is not None] + (mcp.secrets() if mcp else [])


async def start_mcp(
    settings: Settings, tools: ToolRegistry, metrics: Metrics, store: Store | None = None
) -> McpHub | None:
    """The MCP servers' hub, started, when a servers file is configured. The SDK is
    imported only then, and in a thread: it takes a second or two, and boot waits for no
    server (each connects in its own task)."""
    mcp = configured(settings)
    if mcp is None:
        return None
    hub_module = await asyncio.to_thread(importlib.import_module, "app.tools.mcp.hub")
    hub: McpHub = hub_module.McpHub(mcp, settings=settings, registry=tools, store=store)
    metrics.registry.register(hub_module.McpCollector(hub))
    hub.start()
    return hub


def install_endpoints(
    app: FastAPI, turn_serving: TurnServing, background: BackgroundRuns | None = None
) -> None:
    """Each endpoint's serving object where its router reads it (vLLM's habit). Both share
    one turn serving object, so a session continued on either finds the same twins and
    caches."""
    setattr(app.state, chat.SERVING, ChatServing(turn_serving))
    sessions_service = SessionService(
        store=turn_serving.store,
        profiles=turn_serving.profiles,
        setup=turn_serving.setup,
        turns=turn_serving.turns,
    )
    responses_serving = ResponsesServing(
        turn_serving=turn_serving,
        sessions=sessions_service,
        background=background,
        remote_mcp=RemoteMcp.from_settings(turn_serving.setup.settings),
    )
    setattr(app.state, responses.SERVING, responses_serving)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    install_redaction(known_secrets(settings))
    store = _open_store(settings)
    load_price_table()
    metrics = Metrics()
    count_db_work(
        store.engine,
        on_commit=metrics.db_commits.inc,
        on_statement=metrics.db_statements.inc,
        on_loop_commit=metrics.db_loop_commits.inc,
    )
    turns = TurnManager(
        store,
        metrics,
        max_running=settings.max_concurrent_turns,
        max_kept_bytes=settings.replay_memory_mb << 20,
    )
    clients = UpstreamClients(
        max_connections=settings.upstream_pool_size(), lean=settings.upstream_transport == "lean"
    )
    providers = build_providers(settings, clients, KeyStateStore(store.engine))
    # Probed now rather than at the first command, so the startup log already says whether
    # the terminal tool is offered and, if not, why (a container without the options).
    await asyncio.to_thread(sandbox_status)
    tools = _tool_registry(settings, metrics)
    app.state.mcp = await start_mcp(settings, tools, metrics, store)
    auth = build_authenticator(settings)
    approvals = build_gate(settings, store, auth)
    turn_serving = TurnServing(
        settings=settings,
        store=store,
        turns=turns,
        tools=tools,
        providers=providers,
        metrics=metrics,
        approvals=approvals,
        durable=DurableKeys(IdempotencyStore(store)),
    )
    app.state.courier = AppState(
        settings=settings,
        store=store,
        auth=auth,
        turns=turns,
        providers=providers,
        profiles=turn_serving.profiles,
        setup=turn_serving.setup,
        tools=tools,
        started_at=int(time.time()),
        metrics=metrics,
        approvals=approvals,
        limits=Limits(
            max_concurrent_turns=settings.max_concurrent_turns,
            max_turns_per_end_user=settings.max_turns_per_end_user,
        ),
    )
    install_endpoints(app, turn_serving, _background_runs(settings, store, auth))
    jobs = install_jobs(app, settings, store, auth.by_owner)
    if settings.metrics_port:
        # Loopback only: this listener has no auth, so it must not be reachable from outside.
        start_http_server(settings.metrics_port, addr="127.0.0.1", registry=metrics.registry)
    interval = settings.search_index_interval_s
    indexer = asyncio.create_task(store.keep_search_index(interval)) if interval > 0 else None
    try:
        yield
    finally:
        await jobs.stop()  # no run starts while the turns drain
        await turns.shutdown(drain_s=settings.drain_timeout_s)
        await getattr(app.state, responses.SERVING).aclose()  # its final records land first
        await jobs.aclose()  # the runs' ends, after their responses' final records
        if app.state.mcp is not None:
            await app.state.mcp.aclose()
        if indexer is not None:
            indexer.cancel()
            await asyncio.gather(indexer, return_exceptions=True)
        for provider in providers.values():
            await provider.aclose()
        await clients.aclose()
        store.close()


def _background_runs(
    settings: Settings, store: Store, auth: Authenticator
) -> BackgroundRuns | None:
    """Background responses (those a dead process left running repaired as `failed`), their
    events stored by a flusher and their ends announced by webhooks, from now on."""
    owners = {p.name: p.owner for p in auth.principals()}
    per_owner = {
        owners[k.name]: _webhook_target(k.webhook_url, k.webhook_secret, settings)
        for k in settings.keys
        if k.webhook_url is not None and k.webhook_secret is not None
    }
    default = None
    if settings.webhook_url is not None and settings.webhook_secret is not None:
        default = _webhook_target(settings.webhook_url, settings.webhook_secret, settings)
    webhooks = Webhooks(store, default, per_owner=per_owner) if default or per_owner else None
    repair_unfinished_background(store, webhooks)
    if not settings.background:
        return None
    runs = BackgroundRuns(store, flush_s=settings.response_event_flush_s, webhooks=webhooks)
    runs.start()
    return runs


def _webhook_target(url: str, secret: SecretStr, settings: Settings) -> Target:
    return Target(
        url=url,
        secret=secret.get_secret_value(),
        allow=settings.webhook_allow_hosts,
        timeout_s=settings.webhook_timeout_s,
        retry_first_s=settings.webhook_retry_first_s,
        retry_for_s=settings.webhook_retry_for_s,
    )


def _open_store(settings: Settings) -> Store:
    """The store, with what a previous process left mid-turn set right."""
    # `courier serve` migrated already (app/cli.py); this finds the schema current, or,
    # told not to migrate, refuses one that is not.
    store = Store.open(database(settings), migrate=settings.migrate_on_start)
    # Only leases whose holder process is gone: `courier serve` holds the data directory's
    # lock (app/db/instance.py), but a lease of a live holder must never be taken.
    if cleared := store.clear_dead_leases(holder_alive):
        log.warning("cleared %d turn lease(s) left by a previous process", cleared)
    repair_interrupted_turns(store)
    return store


def _tool_registry(settings: Settings, metrics: Metrics) -> ToolRegistry:
    """Every tool, sharing the machine's tool slots: process-spawning calls past them wait."""
    limit = settings.max_concurrent_tools or machine_slots(settings.tool_memory_bytes)
    slots = ToolSlots(
        limit, on_busy=metrics.tool_slots_busy.set, on_waited=metrics.tool_queue_seconds.observe
    )
    plugins = load_plugin_tools(settings.tool_plugin_specs())
    return ToolRegistry([*builtin_tools(), *plugins], slots=slots)


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_error(exc.errors()).response()


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    # Starlette's headers carry the 405's `Allow`, which a client needs to correct itself.
    headers = dict(exc.headers or {})
    return ApiError(exc.status_code, str(exc.detail), code=code, headers=headers).response()


async def _unhandled(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    # Starlette answers this one outside the middleware stack, so the headers go here too.
    headers = {k.decode(): v.decode() for k, v in SECURITY_HEADERS}
    return ApiError(500, "internal server error", code="internal_error", headers=headers).response()


TELEMETRY_OFF: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
}


def create_app(settings: Settings) -> FastAPI:
    app = DirectApp(
        title="Courier",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # Off unless asked for: looking up three global providers on every request to find
        # none configured cost about 1 % of a turn's instructions.
        telemetry=None if settings.opentelemetry else TELEMETRY_OFF,
    )
    app.state.settings = settings
    app.state.mcp = None
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unhandled)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(chat.router)
    app.serve_directly(chat.router)
    app.include_router(sessions.router)
    app.include_router(turn_routes.router)
    app.include_router(responses.router)
    app.serve_directly(responses.router)
    app.include_router(jobs_routes.router)
    app.include_router(capabilities.router)
    app.include_router(openapi.router)
    app.include_router(metrics_routes.router)
    app.include_router(approval_routes.router)
    app.include_router(tokens.router)
    app.include_router(mcp_routes.router)
    app.add_middleware(HeadAsGet)
    app.add_middleware(CorsMiddleware, origins=settings.cors_origins)
    app.include_router(usage.router)
    app.include_router(console.router)
    # Outermost, so CORS preflights and HEAD answers carry the headers too.
    app.add_middleware(SecurityHeaders)
    if settings.log_format == "json":
        # Only for structured logs: a formatted line per request costs the hot path CPU,
        # and text mode keeps no access log at all. Added last: outermost, so every
        # response, refusals included, gets its request id.
        app.add_middleware(RequestLogMiddleware)
    return app
