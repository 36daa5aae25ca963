"""The chat serving object: a validated chat request in, a running turn (or an ApiError) out.

One request goes: refuse fields that cannot be honoured (`app/api/chat/fields.py`) ->
translate the request into what the agent is asked (`app/api/chat/translate.py`) -> start
it as every endpoint does (`app/api/turn_serving.py`), under the busy strategy the client
chose (`app/api/chat/busy_policy.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.agent.opening.continuity import scope_seed
from app.agent.refusals import Refused, ResumeStale
from app.agent.turn_request import TurnRequest
from app.api.chat.busy_policy import Steered, start_when_free, steer_text
from app.api.chat.fields import ignored_fields, refuse_unsupported
from app.api.chat.parse import LONG_HISTORY, validate_request, validated
from app.api.chat.resend import RecentScans, Resumed, resumed
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http import end_users
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError
from app.api.retries import Retry
from app.api.turn_serving import Asked, StartedTurn, TurnServing
from app.config import BusyStrategy, Profile
from app.security.principal import Principal

__all__ = ["ChatServing", "Retry", "Shortcut", "StartedTurn", "Steered"]


@dataclass(frozen=True, slots=True)
class Shortcut:
    """A resent history cut to what follows its stored prefix (`app/api/chat/resend.py`)."""

    request: ChatCompletionRequest
    """The request with only its leading instructions and the new messages, validated."""
    resumed: Resumed
    data: dict[str, Any]
    """The whole body, for the full path if the stored prefix moves before the lease."""


class ChatServing:
    def __init__(self, turn_serving: TurnServing) -> None:
        self.turn_serving = turn_serving
        self.settings = turn_serving.setup.settings
        self.scans = RecentScans()

    def resolve_profile(self, model: str) -> Profile:
        return self.turn_serving.resolve_profile(model)

    def ignored(self, request: ChatCompletionRequest, profile: Profile) -> tuple[str, ...]:
        """Fields the request set that neither Courier nor this profile's wire uses."""
        provider = self.turn_serving.profiles.provider(profile)
        return tuple(ignored_fields(request, passthrough=provider.passthrough))

    async def shortcut(
        self, data: dict[str, Any], principal: Principal, headers: Mapping[str, str]
    ) -> Shortcut | None:
        """The request cut to what follows the stored conversation it resends, or None:
        the full path (a request naming its session, or anything the scan cannot vouch for).

        Whatever goes wrong here is left to the full path, which validates everything and
        raises the error a client gets today, in today's order."""
        messages, model = data.get("messages"), data.get("model")
        user, safety = data.get("user"), data.get("safety_identifier")
        if (
            principal.session_id is not None  # a bound token names its session
            or "session_id" in data
            or not isinstance(messages, list)
            or not isinstance(model, str)
            or not all(v is None or isinstance(v, str) for v in (user, safety))
            # Only an answer of ours identifies a conversation: a history without one (every
            # new conversation's first request) has nothing stored to resume.
            or not any(type(m) is dict and m.get("role") == "assistant" for m in messages)
        ):
            return None
        try:
            profile = self.turn_serving.profiles.resolve(model)
            on_behalf = end_users.on_behalf(
                headers, self.settings, user=user, safety_identifier=safety
            )
        except (Refused, ApiError):
            return None
        if (
            profile.relay
            or on_behalf.chat is not None  # named conversations: `_place`'s own lookup
            or not (profile.implicit_sessions and self.settings.implicit_sessions)
        ):
            return None
        seed = scope_seed(owner=principal.owner, profile=profile.name, end_user=on_behalf.end_user)
        # On a thread: the lookup reads the store (a read can wait on the disk), and a long
        # history no scan of which is kept costs ms to scan.
        found = await asyncio.to_thread(
            resumed, self.turn_serving.store, seed, messages, self.scans
        )
        if found is None:
            return None
        try:
            request = validate_request({**data, "messages": found.tail(messages)})
            refuse_unsupported(request)  # its errors would name the tail's indexes
        except ApiError:
            return None
        return Shortcut(request, found, data)

    async def answer(
        self,
        request: ChatCompletionRequest,
        asked: Asked,
        session_id: str | None,
        *,
        retry: Retry,
        strategy: BusyStrategy,
        shortcut: Shortcut | None = None,
    ) -> StartedTurn | Steered:
        """`start`, applying the busy `strategy` while the session runs another turn."""
        return await start_when_free(
            self.turn_serving.turns,
            partial(
                self.start,
                request,
                asked.principal,
                session_id,
                retry=retry,
                on_behalf=asked.on_behalf,
                shortcut=shortcut,
            ),
            strategy,
            steer_text(request) if strategy == "steer" else None,
        )

    async def start(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        session_id: str | None,
        *,
        retry: Retry,
        on_behalf: OnBehalf,
        shortcut: Shortcut | None = None,
    ) -> StartedTurn:
        """Start (or reattach) the turn: by the shortcut when the request has one and its
        stored prefix still holds under the lease, else by the full path."""
        asked = Asked(principal, on_behalf)
        if shortcut is not None:
            try:
                return await self._start(shortcut.request, asked, session_id, retry, shortcut)
            except ResumeStale:
                request = await validated(shortcut.data)
        return await self._start(request, asked, session_id, retry, None)

    async def _start(
        self,
        request: ChatCompletionRequest,
        asked: Asked,
        session_id: str | None,
        retry: Retry,
        shortcut: Shortcut | None,
    ) -> StartedTurn:
        """Refuse what cannot run before writing anything, then start (or reattach) the turn."""
        # A long history (10,000 messages, images to decode) is checked and translated off
        # the loop (its check alone took 4.6 ms there); a short one costs less than the hop.
        long = len(request.messages) > LONG_HISTORY
        if long:
            await asyncio.to_thread(refuse_unsupported, request)
        else:
            refuse_unsupported(request)
        principal = asked.principal

        def translate(profile: Profile) -> TurnRequest:
            return turn_request(
                request,
                owner=principal.owner,
                admin=principal.admin,
                session_id=session_id,
                profile=profile,
                on_behalf=asked.on_behalf,
                bound_session=principal.session_id,
                resume=shortcut.resumed if shortcut is not None else None,
            )

        return await self.turn_serving.start(
            asked, retry, model=request.model, translate=translate, off_loop=long
        )
