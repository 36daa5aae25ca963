"""A route whose endpoint takes the request and returns the response, nothing between.

FastAPI's request handler solves the endpoint's dependencies, binds its parameters and
validates its response on every call. Skipping it, with state and principal resolved in
the endpoint instead of through `Depends`, saved about 0.3 ms of CPU per new-session
request (two servers side by side, alternating blocks of benchmarks/hot_path.py's
request). The turn routes read, bound and parse their own bodies, so they need none of
it; they stay `APIRoute`s, so `/openapi.json` still lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


class DirectRoute(APIRoute):
    """An `APIRoute` whose endpoint is `async def endpoint(request) -> Response`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint
