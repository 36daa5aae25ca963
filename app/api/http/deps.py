"""Annotated dependency aliases, so route signatures read like sentences."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, Request

from app.api.http.errors import ApiError
from app.api.state import AppState
from app.security.principal import ADMIN, APPROVALS, CHAT, METRICS, SESSIONS_READ, Principal
from app.security.rate_limits import LimitExceeded, TurnSlot

# The dependencies below do no I/O, so they are `async def`: FastAPI runs a plain `def`
# dependency in the thread pool, a thread hop per request (about 1 ms of CPU for three).


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.courier
    return state


async def get_state(request: Request) -> AppState:
    return state_of(request)


StateDep = Annotated[AppState, Depends(get_state)]


def limit_error(exc: LimitExceeded) -> ApiError:
    return ApiError(
        429, exc.message, code=exc.code, headers={"Retry-After": str(exc.retry_after_s)}
    )


def authenticate(request: Request, state: AppState, *scopes: str) -> Principal:
    """The principal, if it holds at least one of `scopes` and is within its rate limit."""
    principal = state.auth.authenticate(request.headers.get("authorization"))
    if principal is None:
        raise ApiError(
            401,
            "invalid or missing API key; send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    # `admin` is the operator's key: it may do everything any scope allows.
    if not principal.admin and not principal.scopes & set(scopes):
        wanted = "' or '".join(scopes)
        raise ApiError(403, f"this key lacks the '{wanted}' scope", code="insufficient_scope")
    try:
        state.limits.check_rate(principal)
    except LimitExceeded as exc:
        raise limit_error(exc) from None
    return principal


@contextmanager
def holding_turn_slot(
    state: AppState, principal: Principal, *, end_user: str | None = None
) -> Iterator[TurnSlot]:
    """A running turn's place under the global, per-key and per-end-user caps (or 429),
    given back if the turn fails to start; once it starts, the caller binds the slot to
    its task."""
    try:
        slot = state.limits.acquire_turn(principal, end_user=end_user)
    except LimitExceeded as exc:
        raise limit_error(exc) from None
    try:
        yield slot
    except BaseException:
        slot.release()
        raise


async def get_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, CHAT)


async def get_metrics_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, METRICS)


def get_reader(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, SESSIONS_READ)


def get_approver(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, APPROVALS)


def get_minter(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, CHAT, "admin")


def get_admin_principal(request: Request, state: StateDep) -> Principal:
    return authenticate(request, state, ADMIN)


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminPrincipalDep = Annotated[Principal, Depends(get_admin_principal)]
MetricsPrincipalDep = Annotated[Principal, Depends(get_metrics_principal)]
ReaderDep = Annotated[Principal, Depends(get_reader)]
ApproverDep = Annotated[Principal, Depends(get_approver)]
MinterDep = Annotated[Principal, Depends(get_minter)]


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
