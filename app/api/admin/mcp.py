"""GET /v1/mcp/servers: each configured MCP server's state, tools, last error and call
counts, for the operator (admin scope).

Names only: never an env or header value, nor the server's URL (a query string may hold a
token); a command shows as its base name and argument count.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.http.deps import AdminPrincipalDep

router = APIRouter()


@router.get("/v1/mcp/servers")
async def mcp_servers(request: Request, _admin: AdminPrincipalDep) -> dict[str, Any]:
    hub = getattr(request.app.state, "mcp", None)
    return {"object": "list", "data": hub.status() if hub is not None else []}
