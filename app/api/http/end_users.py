"""Whom a request is for when one API key serves many people: the app's end user, and the
app's own name for the conversation.

Open WebUI, LibreChat and most apps call Courier with one key for all their users. The key
is the boundary the server can prove; inside it the app says which of its users a request
is for, and that user's memory notes, transcripts, sessions and spend are kept apart from
the others' (`memory`, `session_search`, continuity, the sessions list, spend caps).

The end user is the first of, in this order:
1. the header `X-Courier-End-User`;
2. the headers named in `COURIER_END_USER_HEADERS`, in their order (Open WebUI:
   `X-OpenWebUI-User-Id`);
3. the body's `user`, then its `safety_identifier`.
Headers win because the operator configures them in the app or proxy, which fills them from
its own login, while a body field is often whatever the end user's client wrote. A body value
that differs from a header is not an error: OpenAI asks for `safety_identifier` to be a hash
of the user's id, so the two legitimately differ. Without any of them the request has no
end user: it sees only what was stored without one, never an end user's records.

A bad value (too long, control characters) is a 400 naming where it came from: silently
dropping it would file the request under "no end user", next to everyone else's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.api.http.errors import ApiError
from app.config import Settings

END_USER_HEADER = "x-courier-end-user"
MAX_CHARS = 256
"""Longest end-user id or conversation name: ids and e-mail addresses fit with room."""


@dataclass(frozen=True, slots=True)
class OnBehalf:
    """The app's end user (None: none sent) and its name for the conversation, if any."""

    end_user: str | None = None
    chat: str | None = None


def _checked(raw: str | None, *, param: str, code: str) -> str | None:
    """The value without surrounding blanks; None when empty; a 400 when unusable."""
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        return None
    if len(value) > MAX_CHARS:
        raise ApiError(
            400, f"{param} is longer than {MAX_CHARS} characters", param=param, code=code
        )
    if not value.isprintable():
        raise ApiError(400, f"{param} contains control characters", param=param, code=code)
    return value


def _first_header(headers: Mapping[str, str], names: tuple[str, ...], code: str) -> str | None:
    for name in names:
        found = _checked(headers.get(name), param=name, code=code)
        if found is not None:
            return found
    return None


def end_user_header(headers: Mapping[str, str], settings: Settings) -> str | None:
    """The end user the request's headers name, if any (routes without a body use this)."""
    names = (END_USER_HEADER, *settings.end_user_headers)
    return _first_header(headers, names, "invalid_end_user")


def on_behalf(
    headers: Mapping[str, str],
    settings: Settings,
    *,
    user: str | None,
    safety_identifier: str | None,
) -> OnBehalf:
    """Whom a chat or Responses request is for, by the precedence above."""
    end_user = (
        end_user_header(headers, settings)
        or _checked(user, param="user", code="invalid_end_user")
        or _checked(safety_identifier, param="safety_identifier", code="invalid_end_user")
    )
    chat = _first_header(headers, settings.session_headers, "invalid_session_header")
    return OnBehalf(end_user=end_user, chat=chat)


def listing_scope(
    headers: Mapping[str, str], settings: Settings, *, requested: str | None
) -> str | None:
    """Whose sessions a listing or search shows: the end user the headers name, else the
    `user` the caller asked for (None: every end user of the key). A request acting for one
    end user may not ask for another's."""
    own = end_user_header(headers, settings)
    asked = _checked(requested, param="user", code="invalid_end_user")
    if own is not None and asked is not None and asked != own:
        raise ApiError(
            400,
            "this request acts for one end user (its headers name it); `user` may only repeat it",
            param="user",
            code="end_user_mismatch",
        )
    return own or asked
