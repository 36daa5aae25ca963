"""GET /console: the operator console's static files, under a restrictive CSP.

The policy allows scripts, styles and fetches from this origin only, no inline code, no
framing: a transcript is model output, and if any of it ever reached the page as markup the
browser would still refuse to run it. The files are read once, at import.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from app.api.admin.console import STATIC_DIR
from app.api.http.errors import ApiError

router = APIRouter()

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
_TYPES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
}
_FILES = {name: (STATIC_DIR / name).read_bytes() for name in _TYPES}


@router.get("/console", include_in_schema=False)
async def console_root() -> Response:
    # The trailing slash keeps relative URLs and the hash router on one path.
    return RedirectResponse("/console/", status_code=307)


@router.get("/console/", include_in_schema=False)
async def console_index() -> Response:
    return Response(_FILES["index.html"], media_type=_TYPES["index.html"], headers=HEADERS)


@router.get("/console/{name}", include_in_schema=False)
async def console_asset(name: str) -> Response:
    # An allowlist, not a path join: no `..`, no other file of the package is reachable.
    if name not in _FILES or name == "index.html":
        raise ApiError(404, f"no console file '{name}'", code="not_found")
    return Response(_FILES[name], media_type=_TYPES[name], headers=HEADERS)
