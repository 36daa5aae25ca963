"""Read a request body as one JSON object, with the errors a client can act on.

Shared by the routes that parse their body by hand (to bound its size first) so each one
refuses bad JSON with the same 400 instead of FastAPI's 422.
"""

from __future__ import annotations

import json
from typing import Any

from app.protocol.errors import ApiError


def parse_json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body.decode("utf-8"))
        # A lone surrogate ("\ud800") parses but cannot be stored or sent upstream: refuse
        # it here rather than fail half-way through creating the session.
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (json.JSONDecodeError, UnicodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, "request body is nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    return data
