"""Every session-scoped route is in the bindings table, and every id in its path is resolved
by one of the resolvers (the 404 table itself runs against a real server in tests/e2e/)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from app.api.http import owned
from app.config import load_settings
from app.main import create_app
from tests.support.bindings import ROUTES

UNSCOPED: dict[tuple[str, str], str] = {
    ("GET", "/health"): "liveness, no principal",
    ("GET", "/health/ready"): "readiness, no principal",
    ("GET", "/v1/models"): "the configured profiles, the same for every session",
    ("GET", "/v1/models/{model_id:path}"): "a profile by name, not a session's",
    ("GET", "/v1/capabilities"): "what the server offers, the same for every session",
    ("GET", "/openapi.json"): "the API's description (admin)",
    ("GET", "/metrics"): "process-wide counters (metrics scope)",
    ("GET", "/v1/mcp/servers"): "the MCP servers' state, the same for every session (admin)",
    ("GET", "/console"): "the console's static page",
    ("GET", "/console/"): "the console's static page",
    ("GET", "/console/{name}"): "the console's static files, by file name",
    # A key's jobs, not a session's: a bound token gets 403 on each, another key's job is a
    # 404 (`reachable_job`, tests/e2e/test_jobs.py).
    ("POST", "/v1/jobs"): "a key's jobs; a bound token gets 403",
    ("GET", "/v1/jobs"): "a key's jobs; a bound token gets 403",
    ("GET", "/v1/jobs/{job_id}"): "a key's job, resolved by reachable_job",
    ("PATCH", "/v1/jobs/{job_id}"): "a key's job, resolved by reachable_job",
    ("DELETE", "/v1/jobs/{job_id}"): "a key's job, resolved by reachable_job",
    ("POST", "/v1/jobs/{job_id}/run"): "a key's job, resolved by reachable_job",
    ("GET", "/v1/jobs/{job_id}/runs"): "a key's job, resolved by reachable_job",
}
RESOLVERS = {
    owned.chat_session,
    owned.read_session,
    owned.read_summary,
    owned.reachable_response,
    owned.reachable_approval,
    owned.reachable_grant,
}
"""The dependencies that resolve an id for the principal (app/api/http/owned.py)."""


def _registered() -> dict[tuple[str, str], Any]:
    settings = load_settings(
        api_key="k" * 8 + "0123456789abcdef", upstream_base_url="http://127.0.0.1:9/v1"
    )
    app = create_app(settings)
    found: dict[tuple[str, str], Any] = {}
    for context in iter_route_contexts(app.routes):
        for method in context.methods or ():
            if method != "HEAD":
                found[(method, str(context.path))] = context.original_route
    return found


def test_every_route_is_in_the_table() -> None:
    registered = set(_registered())
    unlisted = registered - set(ROUTES) - set(UNSCOPED)
    assert not unlisted, f"routes with no binding case (add them to ROUTES or UNSCOPED): {unlisted}"
    stale = (set(ROUTES) | set(UNSCOPED)) - registered
    assert not stale, f"table entries for routes the app no longer has: {stale}"


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_id_in_a_path_is_resolved_by_one_of_the_resolvers() -> None:
    """The check written once: a route that took an id from its path and looked it up
    itself would be the route that forgets the binding."""
    for (method, path), route in _registered().items():
        if "{" not in path or (method, path) in UNSCOPED:
            continue
        assert isinstance(route, APIRoute), path
        assert RESOLVERS & set(_calls(route.dependant)), f"{method} {path} resolves its own id"
