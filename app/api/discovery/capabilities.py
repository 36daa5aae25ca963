"""GET /v1/capabilities: what this server offers, so a client or console can adapt instead
of probing with requests that fail.

Features are read from the code paths that implement them, not hand-kept flags, so the
document cannot claim something the server refuses.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.http.deps import PrincipalDep, StateDep
from app.api.responses import wire

router = APIRouter()


@router.get("/v1/capabilities")
async def capabilities(state: StateDep, _principal: PrincipalDep) -> dict[str, Any]:
    s = state.settings
    profiles = [
        {
            "id": p.name,
            "wire": p.provider,
            "upstream_model": p.model,
            "context_window": p.context_window,
            "max_output_tokens": p.max_output_tokens,
            "max_iterations": p.max_iterations,
            "toolsets": list(p.toolsets),
            "tools": state.tools.names(p.toolsets),
            "terminal_backend": p.terminal_backend,
            "network": p.network,
            "cache_strategy": p.cache_strategy,
            "cache_ttl": p.cache_ttl,
            "private_workspace": p.workspace is None,
            "accept_any_model": p.accept_any_model,
        }
        for p in s.all_profiles()
    ]
    return {
        "object": "courier.capabilities",
        "profiles": profiles,
        "features": {
            "chat_completions": True,
            "responses": True,
            "streaming": True,
            "server_tools": True,
            "client_tools": wire.CLIENT_TOOLS,
            "structured_output": wire.STRUCTURED_OUTPUT,
            "image_input": True,
            "background_responses": s.background,
            "previous_response_id": True,
            "sessions_api": True,
            "session_fork": True,
            "session_search": True,
            "idempotency_keys": True,
            "courier_tool_events": True,
            "usage_ledger": True,
            "spend_caps": any(
                cap is not None
                for cap in (s.spend_cap_key_usd, s.spend_cap_key_daily_usd, s.spend_cap_session_usd)
            ),
        },
        "limits": {
            "max_body_bytes": s.max_body_bytes,
            "keepalive_s": s.keepalive_s,
            "spend_cap_session_usd": _usd(s.spend_cap_session_usd),
            "spend_cap_key_usd": _usd(s.spend_cap_key_usd),
            "spend_cap_key_daily_usd": _usd(s.spend_cap_key_daily_usd),
            "sessions_page_max": 100,
            "messages_page_max": 100,
        },
    }


def _usd(value: object) -> str | None:
    return None if value is None else str(value)
