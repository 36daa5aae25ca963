"""create_app(settings): the FastAPI application, with everything built in the lifespan.

Nothing is built at import time, so tests can create apps with their own settings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import start_http_server
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.agent.recovery import repair_interrupted_turns
from app.agent.turns import TurnManager
from app.config import Settings
from app.db.idempotency_store import IdempotencyStore
from app.db.key_store import KeyStateStore
from app.db.store import Store
from app.durable_idempotency import DurableKeys
from app.metrics import Metrics
from app.protocol.errors import ApiError, validation_error
from app.providers.base import Provider
from app.providers.factory import build_keyed_provider
from app.providers.keyring import KeyStates
from app.routes import chat, health, models, sessions
from app.routes import metrics as metrics_routes
from app.routes import turns as turn_routes
from app.routes.cors import CorsMiddleware
from app.routes.head import HeadAsGet
from app.security.auth import Authenticator
from app.serving import ChatServing
from app.state import AppState
from app.tools.plugins import load_plugin_tools
from app.tools.registry import ToolRegistry
from app.tools.terminal import terminal_tools
from app.tools.todo import state_tools
from app.tools.web import web_tools
from app.tools.workspace import workspace_tools

log = logging.getLogger(__name__)


def build_providers(settings: Settings, key_states: KeyStates) -> dict[str, Provider]:
    return {
        profile.name: build_keyed_provider(profile, key_states)
        for profile in settings.all_profiles()
    }


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    store = Store.open(settings.db_path)
    # SQLite is one process's file: a lease still set at startup belongs to a dead process.
    if cleared := store.clear_all_leases():
        log.warning("cleared %d turn lease(s) left by a previous process", cleared)
    repair_interrupted_turns(store)
    metrics = Metrics()
    turns = TurnManager(store, metrics)
    providers = build_providers(settings, KeyStateStore(store.engine))
    tools = ToolRegistry(
        [
            *workspace_tools(),
            *state_tools(),
            *web_tools(),
            *terminal_tools(),
            *load_plugin_tools(settings.tool_plugin_specs()),
        ]
    )
    app.state.courier = AppState(
        settings=settings,
        store=store,
        auth=Authenticator(
            settings.api_key,
            admin_key=settings.admin_api_key,
            metrics_key=settings.metrics_api_key,
        ),
        turns=turns,
        providers=providers,
        chat=ChatServing(
            settings=settings,
            store=store,
            turns=turns,
            tools=tools,
            providers=providers,
            metrics=metrics,
            durable=DurableKeys(IdempotencyStore(store.engine)),
        ),
        started_at=int(time.time()),
        metrics=metrics,
    )
    if settings.metrics_port:
        # Loopback only: this listener has no auth, so it must not be reachable from outside.
        start_http_server(settings.metrics_port, addr="127.0.0.1", registry=metrics.registry)
    try:
        yield
    finally:
        await turns.shutdown(drain_s=settings.drain_timeout_s)
        for provider in providers.values():
            await provider.aclose()
        store.close()


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_error(exc.errors()).response()


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return ApiError(exc.status_code, str(exc.detail), code=code).response()


async def _unhandled(_request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return ApiError(500, "internal server error", code="internal_error").response()


def create_app(settings: Settings) -> FastAPI:
    app = FastAPI(
        title="Courier",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unhandled)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(chat.router)
    app.include_router(sessions.router)
    app.include_router(turn_routes.router)
    app.include_router(metrics_routes.router)
    app.add_middleware(HeadAsGet)
    app.add_middleware(CorsMiddleware, origins=settings.cors_origins)
    return app
