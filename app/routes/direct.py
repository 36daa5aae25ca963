"""A route whose endpoint takes the request and returns the response, nothing between.

FastAPI's request handler solves the endpoint's dependencies, binds its parameters and
validates its response on every call: about 0.4 ms of CPU per request even for an
endpoint whose only parameter is the `Request` (A/B, benchmarks/hot_path.py's new-session
request), the same again as resolving state and principal through `Depends`. The turn
routes read, bound and parse their own bodies, so they skip all of it; they stay
`APIRoute`s, so `/openapi.json` still lists them.
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
