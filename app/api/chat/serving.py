"""The chat serving object: a validated chat request in, a running turn (or an ApiError) out.

One request goes: refuse fields that cannot be honoured (`app/api/chat/fields.py`) ->
translate the request into what the agent is asked (`app/api/chat/translate.py`) -> start
it as every endpoint does (`app/api/turn_serving.py`), under the busy strategy the client
chose (`app/api/chat/busy_policy.py`).
"""

from __future__ import annotations

import asyncio
from functools import partial

from app.agent.turn_request import TurnRequest
from app.api.chat.busy_policy import Steered, start_when_free, steer_text
from app.api.chat.fields import ignored_fields, refuse_unsupported
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.retries import Retry
from app.api.turn_serving import Asked, StartedTurn, TurnServing
from app.config import BusyStrategy, Profile
from app.security.principal import Principal

__all__ = ["ChatServing", "Retry", "StartedTurn", "Steered"]

LONG_HISTORY = 64
"""Messages past which translating a request is worth a thread hop."""


class ChatServing:
    def __init__(self, turn_serving: TurnServing) -> None:
        self.turn_serving = turn_serving

    def resolve_profile(self, model: str) -> Profile:
        return self.turn_serving.resolve_profile(model)

    def ignored(self, request: ChatCompletionRequest, profile: Profile) -> tuple[str, ...]:
        """Fields the request set that neither Courier nor this profile's wire uses."""
        provider = self.turn_serving.profiles.provider(profile)
        return tuple(ignored_fields(request, passthrough=provider.passthrough))

    async def answer(
        self,
        request: ChatCompletionRequest,
        asked: Asked,
        session_id: str | None,
        *,
        retry: Retry,
        strategy: BusyStrategy,
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
    ) -> StartedTurn:
        """Refuse what cannot run before writing anything, then start (or reattach) the turn."""
        # A long history (10,000 messages, images to decode) is checked and translated off
        # the loop (its check alone took 4.6 ms there); a short one costs less than the hop.
        long = len(request.messages) > LONG_HISTORY
        if long:
            await asyncio.to_thread(refuse_unsupported, request)
        else:
            refuse_unsupported(request)

        def translate(profile: Profile) -> TurnRequest:
            return turn_request(
                request,
                owner=principal.owner,
                admin=principal.admin,
                session_id=session_id,
                profile=profile,
                on_behalf=on_behalf,
                bound_session=principal.session_id,
            )

        return await self.turn_serving.start(
            Asked(principal, on_behalf),
            retry,
            model=request.model,
            translate=translate,
            off_loop=long,
        )
