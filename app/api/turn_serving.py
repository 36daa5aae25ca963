"""Starting a turn, for every front door that runs one: chat completions and Responses.

Each endpoint translates its own request into what the agent is asked (a `TurnRequest`)
and hands it here, where the rest is the same for both: resolve the profile, reattach a
retry to the turn it repeats (`app/api/retries.py`), open the turn in the session's
lifecycle (`app/agent/opening/lifecycle.py`; a relay profile runs
`app/agent/turns/relay.py`) and launch it. One instance serves both endpoints, so a
session continued on either finds the same twins, prefixes and compressor.

The agent names why it refuses; `app/api/http/statuses.py` turns that into HTTP.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
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
from app.api.http.end_users import OnBehalf
from app.api.http.statuses import api_error, storage_unavailable
from app.api.retries import DurableKeys, Retry, Twins
from app.config import Profile, Settings
from app.db.store import PersistenceError, Store
from app.observe.metrics import Metrics
from app.providers.base import Provider
from app.security.principal import Principal
from app.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


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
    reattached: bool = False
    """A retry found the turn it repeats (running or finished) instead of starting one."""


OnOpen = Callable[[TurnHandle, str], None]
"""Called with the new turn's handle and session inside the turn's opening unit, so what
it writes commits with the turn or not at all (a background response's row)."""

Translate = Callable[[Profile], TurnRequest]
"""An endpoint's request as a `TurnRequest` for the resolved profile; raises `ApiError`
naming the endpoint's own field for what the client got wrong."""


class TurnServing:
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
        self.store = store
        self.turns = turns
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
        asked: Asked,
        retry: Retry,
        *,
        model: str,
        translate: Translate,
        off_loop: bool = False,
        on_open: OnOpen | None = None,
    ) -> StartedTurn:
        """Start the turn `translate` describes, or reattach to the one this request
        repeats. `off_loop`: translate in a thread (a long history, images to decode)."""
        try:
            async with self.twins.opening(asked.twins, retry):
                profile = self.profiles.resolve(model)
                if (seen := self.twins.find(asked.twins, retry)) is not None:
                    return StartedTurn(seen, seen.session_id, profile, reattached=True)
                req = (
                    await asyncio.to_thread(translate, profile) if off_loop else translate(profile)
                )
                handle = await self._launch(req, asked.twins, retry, on_open)
                self.twins.remember(handle, asked.twins, retry)
                return StartedTurn(handle, handle.session_id, profile)
        except Refused as refused:
            raise api_error(refused) from None
        except PersistenceError:
            log.exception("could not open a turn: the store refused the write")
            raise storage_unavailable() from None

    async def _launch(
        self, req: TurnRequest, twins: str, retry: Retry, on_open: OnOpen | None
    ) -> TurnHandle:
        if not req.profile.relay:
            return await self._open(req, retry, twins, on_open)
        provider = self.profiles.provider(req.profile)
        relay = relay_input(
            req, store=self.store, provider=provider, spend=self.spend, metrics=self.metrics
        )
        handle = self.turns.start_task(
            relay.ledger_session, lambda h: run_relay(relay, h), profile=req.profile.name
        )
        self.twins.record_start(handle, twins, retry, session_id=handle.session_id)
        if on_open is not None:
            # A relay has no opening unit: its hook commits on its own, as the relay runs.
            await self.store.off_loop(partial(self._opened_alone, on_open, handle))
        return handle

    def _opened_alone(self, on_open: OnOpen, handle: TurnHandle) -> None:
        with self.store.unit():
            on_open(handle, handle.session_id)

    async def _open(
        self, req: TurnRequest, retry: Retry, twins: str, on_open: OnOpen | None = None
    ) -> TurnHandle:
        """Open the turn on the store's writer thread (its first transaction, with a keyed
        turn's durable record under the principal's replay `scope`), then run it."""
        handle = self.turns.new_handle()

        def open_turn() -> OpenedTurn:
            with self.store.unit():
                opened = self.sessions.open(req, turn_id=handle.turn_id, emit=handle.publish)
                session_id = opened.context.session_id
                handle.placed = opened.placed
                self.twins.record_start(handle, twins, retry, session_id=session_id)
                if on_open is not None:
                    on_open(handle, session_id)
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
