"""Annotated dependency aliases, so route signatures read like sentences."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.protocol.errors import ApiError
from app.security.auth import ADMIN, CHAT, METRICS, Principal
from app.state import AppState


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.courier
    return state


StateDep = Annotated[AppState, Depends(get_state)]


def authenticate(request: Request, state: AppState, scope: str) -> Principal:
    principal = state.auth.authenticate(request.headers.get("authorization"))
    if principal is None:
        raise ApiError(
            401,
            "invalid or missing API key; send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if scope not in principal.scopes:
        raise ApiError(403, f"this key lacks the '{scope}' scope", code="insufficient_scope")
    return principal


def get_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, CHAT)


def get_metrics_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, METRICS)


def get_admin_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, ADMIN)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminPrincipalDep = Annotated[Principal, Depends(get_admin_principal)]
MetricsPrincipalDep = Annotated[Principal, Depends(get_metrics_principal)]


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The body, refusing past `limit` bytes whether or not Content-Length was sent."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body exceeds {limit} bytes", code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"request body exceeds {limit} bytes", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)
