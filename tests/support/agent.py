"""The agent's turn path in-process: the real store, opening, turn manager and loop, with a
scripted provider as the upstream and no HTTP, server or simulator.

    agent = Agent(store, settings, provider, tools=[LOOKUP])
    handle = await agent.launch("what is in the box?")    # TurnManager.launch
    finished = await handle.task
    handle, opened = await agent.open("and now?", session_id=...)  # for run_turn itself

The request a client would send is built here the way the HTTP face translates one
(`app/api/chat/translate.py`): a `TurnRequest` of user messages. Everything from there on is
the code a server runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from app.agent.cost.spend_caps import SpendCaps
from app.agent.events import ToolFinished, TurnEvent
from app.agent.opening.lifecycle import OpenedTurn, SessionLifecycle
from app.agent.opening.profiles import Profiles
from app.agent.opening.session_setup import SessionSetup
from app.agent.turn_request import IncomingMessage, TurnRequest, VisibleMessage
from app.agent.turns.handle import TurnHandle
from app.agent.turns.manager import TurnManager
from app.config import Settings, load_settings
from app.db.store import NewMessage, Store
from app.observe.metrics import Metrics
from app.providers.base import SamplingParams
from app.tools.registry import Tool, ToolRegistry
from tests.support.scripted import ScriptedProvider

API_KEY = "in-process-key-0123456789abcdef"
OWNER = "key_in_process"


def agent_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for an in-process agent: nothing is reached over the network (the provider is
    scripted), and the data directory is the test's."""
    return load_settings(
        api_key=API_KEY, data_dir=data_dir, upstream_base_url="http://127.0.0.1:9", **overrides
    )


def user(text: str, index: int = 0) -> IncomingMessage:
    """A user message as the chat translation makes one (`incoming`, text only)."""
    row = NewMessage(role="user", content=text)
    return IncomingMessage(
        "user", lambda: row, VisibleMessage("user", text), (), f"messages[{index}]"
    )


class Agent:
    """One server's worth of the agent, with `provider` as every profile's upstream."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        provider: ScriptedProvider,
        *,
        tools: Sequence[Tool] = (),
    ) -> None:
        self.store = store
        self.settings = settings
        self.provider = provider
        self.metrics = Metrics()
        self.turns = TurnManager(store, self.metrics)
        self.profiles = Profiles(settings, {p.name: provider for p in settings.all_profiles()})
        self.lifecycle = SessionLifecycle(
            store=store,
            turns=self.turns,
            tools=ToolRegistry(list(tools)),
            profiles=self.profiles,
            setup=SessionSetup(settings, store),
            spend=SpendCaps(settings, store),
            metrics=self.metrics,
            implicit_sessions=False,
        )

    def request(self, *texts: str, session_id: str | None = None) -> TurnRequest:
        return TurnRequest(
            owner=OWNER,
            admin=False,
            session_id=session_id,
            profile=self.profiles.resolve("courier"),
            instructions=(),
            messages=tuple(user(text, i) for i, text in enumerate(texts)),
            client_tools=(),
            tool_choice="auto",
            sampling=SamplingParams(),
        )

    async def open(
        self, *texts: str, session_id: str | None = None
    ) -> tuple[TurnHandle, OpenedTurn]:
        """The turn opened (session, lease, messages, turn row: one transaction on the store's
        writer thread, as a request's serving opens it), not yet run."""
        handle = self.turns.new_handle()
        req = self.request(*texts, session_id=session_id)
        opening = partial(self.lifecycle.open, req, turn_id=handle.turn_id, emit=handle.publish)
        return handle, await self.store.off_loop(opening, first=True)

    async def launch(self, *texts: str, session_id: str | None = None) -> TurnHandle:
        """The turn opened and handed to the turn manager, as a request's serving does."""
        handle, opened = await self.open(*texts, session_id=session_id)
        return self.turns.launch(handle, opened.context, on_finish=opened.on_finish)

    def transcript(self, session_id: str) -> list[tuple[Any, ...]]:
        """The session's stored log: (role, content, tool calls, call id, is_error) a row."""
        return [
            (m.role, m.content, list(m.tool_calls), m.tool_call_id, m.is_error)
            for m in self.store.active_messages(session_id=session_id)
        ]


def timeless(events: Sequence[TurnEvent]) -> list[TurnEvent]:
    """Events with their measured durations zeroed: what a whole-transcript assert compares."""
    return [replace(e, duration_ms=0.0) if isinstance(e, ToolFinished) else e for e in events]
