"""Errors in the OpenAI shape `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from app.security.redact import redact_text

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_quota",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type_: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or _TYPE_BY_STATUS.get(status, "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        # Messages echo client input (a model name, a param): a pasted key must not come back.
        error = ErrorBody(
            message=redact_text(self.message), type=self.type, param=self.param, code=self.code
        )
        return ErrorResponse(error=error).model_dump(mode="json")

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def loc_to_param(loc: Sequence[int | str]) -> str:
    """('messages', 0, 'role') -> 'messages[0].role', the form OpenAI uses in `param`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("body", "query", "path", "header") and not out:
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def validation_error(exc: ValidationError | Sequence[Any], *, at: str = "") -> ApiError:
    """The 400 of a model's first error; `at` is where the model sits in the request
    (`tools[0]`) when it is a part of it."""
    errors = exc.errors() if isinstance(exc, ValidationError) else list(exc)
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    # Tagged unions add the literal's name to `loc`; drop it so `param` names the field.
    loc = [p for p in first.get("loc", ()) if p not in ("str", "list[ContentPart]")]
    inner = loc_to_param(loc)
    joined = f"{at}.{inner}" if at and inner and not inner.startswith("[") else at + inner
    param = joined or None
    message = str(first.get("msg", "invalid request"))
    if param:
        message = f"{param}: {message}"
    return ApiError(400, message, param=param, code="invalid_request")
