"""GET /health (liveness: the process answers) and GET /health/ready (readiness: the database
commits, every profile's upstream answers, and the sandbox starts where a profile needs it).

Neither needs a key, since orchestrators probe without one; so neither names URLs, paths
or versions, only which check failed and its kind.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.http.deps import StateDep
from app.db.write_probe import database_writable
from app.providers.reachability import probe_upstream
from app.tools.sandbox.process import bwrap_available

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/health/ready")
async def ready(state: StateDep) -> JSONResponse:
    profiles = state.settings.all_profiles()
    upstreams = await asyncio.gather(*(probe_upstream(p.provider, p.base_url) for p in profiles))
    checks: dict[str, str | None] = {
        "database": await asyncio.to_thread(database_writable, state.store)
    }
    for profile, problem in zip(profiles, upstreams, strict=True):
        checks[f"upstream:{profile.name}"] = problem
    sandboxed = [
        p.name for p in profiles if p.terminal_backend == "sandbox" and "core" in p.toolsets
    ]
    if sandboxed:
        ok = await asyncio.to_thread(bwrap_available)
        checks["sandbox"] = None if ok else "bubblewrap cannot start a sandbox on this host"
    failing = {name: reason for name, reason in checks.items() if reason is not None}
    body: dict[str, Any] = {
        "status": "unavailable" if failing else "ready",
        "checks": {
            name: {"ok": reason is None, **({"reason": reason} if reason else {})}
            for name, reason in checks.items()
        },
    }
    return JSONResponse(body, status_code=503 if failing else 200)
