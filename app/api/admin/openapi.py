"""GET /openapi.json for the admin scope: one document for every route Courier serves.

Public docs would map the attack surface for anyone; operators generating clients or
fuzzing the server hold the admin key. Routes that read their body by hand (to bound its
size before parsing) declare no body to FastAPI, so their request schemas are added here
from the same pydantic models that parse them; without that the document would describe
`POST /v1/chat/completions` as taking nothing.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.api.chat.wire import ChatCompletionRequest
from app.api.http.deps import AdminPrincipalDep
from app.api.responses.wire import ResponseCreateRequest

router = APIRouter()

HAND_PARSED_BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("/v1/chat/completions", "post"): ChatCompletionRequest,
    ("/v1/responses", "post"): ResponseCreateRequest,
}


def build_document(request: Request) -> dict[str, Any]:
    app = request.app
    cached: dict[str, Any] | None = getattr(app.state, "openapi_document", None)
    if cached is not None:
        return cached
    document = get_openapi(
        title=app.title,
        version=app.version,
        routes=app.routes,
        description="Courier: an AI agent behind an OpenAI-compatible endpoint.",
    )
    document.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
    }
    document["security"] = [{"bearer": []}]
    schemas = document["components"].setdefault("schemas", {})
    for (path, method), model in HAND_PARSED_BODIES.items():
        operation = document.get("paths", {}).get(path, {}).get(method)
        if operation is None:
            continue
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
        operation["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            },
        }
    app.state.openapi_document = document
    return document


@router.get("/openapi.json", include_in_schema=False)
async def openapi(request: Request, _admin: AdminPrincipalDep) -> dict[str, Any]:
    return build_document(request)
