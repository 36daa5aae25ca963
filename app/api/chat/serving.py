"""The chat serving object: a validated chat request in, a running turn (or an ApiError) out.

One request goes: refuse fields that cannot be honoured -> resolve the profile -> reattach
a retry to the turn it repeats (`app/api/retries.py`) -> translate the request into what
the agent is asked (`app/api/chat/translate.py`) -> open the turn in the session's
lifecycle (`app/agent/opening/lifecycle.py`; a relay profile runs
`app/agent/turns/relay.py`) -> launch.
The agent names why it refuses; `app/api/http/statuses.py` turns that into HTTP.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial

from app.agent.approvals import ApprovalGate
from app.agent.cost.spend_caps import SpendCaps
from app.agent.opening.lifecycle import OpenedTurn, SessionLifecycle
from app.agent.opening.profiles import Profiles
from app.agent.opening.session_setup import SessionSetup
from app.agent.refusals import Refused
from app.agent.turn_request import TurnRequest
from app.agent.turns.handle import TurnHandle
from app.agent.turns.manager import TurnManager
from app.agent.turns.relay import relay_input, run_relay
from app.api.chat.fields import ignored_fields, refuse_unsupported
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.http.statuses import api_error, storage_unavailable
from app.api.retries import DurableKeys, Retry, Twins
from app.config import Profile, Settings
from app.db.store import PersistenceError, Store
from app.observe.metrics import Metrics
from app.providers.base import Provider
from app.security.principal import Principal
from app.tools.registry import ToolRegistry

__all__ = ["ChatServing", "Retry", "StartedTurn"]

log = logging.getLogger(__name__)

LONG_HISTORY = 64
"""Messages past which translating a request is worth a thread hop."""


@dataclass(frozen=True, slots=True)
class Asked:
    """Who asks: the key, and whom its app asks for."""

    principal: Principal
    on_behalf: OnBehalf

    @property
    def twins(self) -> str:
        """Where a retry looks for the turn it repeats: the key's, narrowed to one end user
        and one named chat, so two end users' byte-identical retries (the body carries
        neither when headers name them) never reattach to each other's turns."""
        end_user, chat = self.on_behalf.end_user, self.on_behalf.chat
        scope = self.principal.replay_scope  # a bound token's: its session's alone
        if end_user is None and chat is None:
            return scope
        # Newlines cannot occur in either (printable only), so the parts stay apart.
        return "\n".join((scope, end_user or "", chat or ""))


@dataclass(frozen=True, slots=True)
class StartedTurn:
    handle: TurnHandle
    session_id: str
    profile: Profile
    ignored: tuple[str, ...] = ()


class ChatServing:
    def __init__(
        self,
        *,
        settings: Settings,
        store: Store,
        turns: TurnManager,
        tools: ToolRegistry,
        providers: dict[str, Provider],
        metrics: Metrics,
        durable: DurableKeys | None = None,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.turns = turns
        self.tools = tools
        self.metrics = metrics
        self.profiles = Profiles(settings, providers)
        self.setup = SessionSetup(settings, store)
        self.spend = SpendCaps(settings, store)
        self.twins = Twins(turns, durable)
        self.sessions = SessionLifecycle(
            store=store,
            turns=turns,
            tools=tools,
            profiles=self.profiles,
            setup=self.setup,
            spend=self.spend,
            metrics=metrics,
            implicit_sessions=settings.implicit_sessions,
            approvals=approvals,
        )

    def resolve_profile(self, model: str) -> Profile:
        try:
            return self.profiles.resolve(model)
        except Refused as refused:
            raise api_error(refused) from None

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
        asked = Asked(principal, on_behalf)
        try:
            async with self.twins.opening(asked.twins, retry):
                return await self._start(request, asked, session_id, retry)
        except Refused as refused:
            raise api_error(refused) from None
        except PersistenceError:
            log.exception("could not open a turn: the store refused the write")
            raise storage_unavailable() from None

    async def _start(
        self,
        request: ChatCompletionRequest,
        asked: Asked,
        session_id: str | None,
        retry: Retry,
    ) -> StartedTurn:
        # A long history (10,000 messages, images to decode) is checked and translated off
        # the loop (its check alone took 4.6 ms there); a short one costs less than the hop.
        long = len(request.messages) > LONG_HISTORY
        if long:
            await asyncio.to_thread(refuse_unsupported, request)
        else:
            refuse_unsupported(request)
        profile = self.profiles.resolve(request.model)
        provider = self.profiles.provider(profile)
        ignored = tuple(ignored_fields(request, passthrough=provider.passthrough))
        if (seen := self.twins.find(asked.twins, retry)) is not None:
            return StartedTurn(seen, seen.session_id, profile, ignored)
        translate = partial(
            turn_request,
            request,
            owner=asked.principal.owner,
            admin=asked.principal.admin,
            session_id=session_id,
            profile=profile,
            on_behalf=asked.on_behalf,
            bound_session=asked.principal.session_id,
        )
        req = await asyncio.to_thread(translate) if long else translate()
        if profile.relay:
            relay = relay_input(
                req, store=self.store, provider=provider, spend=self.spend, metrics=self.metrics
            )
            handle = self.turns.start_task(
                relay.ledger_session, lambda h: run_relay(relay, h), profile=profile.name
            )
            self.twins.record_start(handle, asked.twins, retry, session_id=handle.session_id)
        else:
            handle = await self._open(req, retry, asked.twins)
        self.twins.remember(handle, asked.twins, retry)
        return StartedTurn(handle, handle.session_id, profile, ignored)

    async def _open(self, req: TurnRequest, retry: Retry, twins: str) -> TurnHandle:
        """Open the turn on the store's writer thread (its first transaction, with a keyed
        turn's durable record under the principal's replay `scope`), then run it."""
        handle = self.turns.new_handle()

        def open_turn() -> OpenedTurn:
            with self.store.unit():
                opened = self.sessions.open(req, turn_id=handle.turn_id, emit=handle.publish)
                session_id = opened.context.session_id
                self.twins.record_start(handle, twins, retry, session_id=session_id)
                return opened

        opening = asyncio.ensure_future(self.store.off_loop(open_turn, first=True))
        try:
            opened = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The client left mid-open; the thread still commits the lease and turn row, so
            # the turn starts and is cancelled at once: its close releases the lease.
            opening.add_done_callback(partial(self._orphaned, handle))
            raise
        return self.turns.launch(handle, opened.context, on_finish=opened.on_finish)

    def _orphaned(self, handle: TurnHandle, opening: asyncio.Future[OpenedTurn]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            return  # refused or failed: the open rolled back and released its lease
        opened = opening.result()
        self.turns.launch(handle, opened.context, on_finish=opened.on_finish, cancelled=True)
