"""The chat serving object: validated request in, a running turn (or an ApiError) out.

Routes only map what this returns to HTTP; the agent never sees HTTP.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from app.agent.budget import Cap, SpendGuard
from app.agent.cache_planner import StablePrefixRegistry
from app.agent.compressor import Compressor
from app.agent.loop import TurnContext
from app.agent.projection import INTERRUPTED_RESULT
from app.agent.prompt import build_prompt, recover_stable_boundary, stable_tier
from app.agent.repair import close_unanswered_calls
from app.agent.tool_snapshot import (
    rebuild_tool_snapshot,
    snapshot_names,
    snapshot_tools,
    specs_from_snapshot,
)
from app.agent.turns import LEASE_TTL_S, SessionBusy, TurnHandle, TurnManager, new_lease_token
from app.config import Profile, Settings
from app.db.models import SessionRow
from app.db.session_query import is_retracted
from app.db.store import NewMessage, Store
from app.metrics import Metrics
from app.protocol.errors import ApiError
from app.protocol.openai import ChatCompletionRequest, ChatMessageIn
from app.providers.base import Provider, SamplingParams
from app.providers.pricing import PriceOverride, price_usage
from app.providers.usage import Usage
from app.security.auth import Principal
from app.tools.memory import memory_snapshot
from app.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

DAY_S = 24 * 3600


@dataclass(frozen=True, slots=True)
class StartedTurn:
    handle: TurnHandle
    session_id: str
    profile: Profile


def new_session_id() -> str:
    # Random, never derived from content: two users sending the same first message must
    # not land in one session.
    return "sess_" + secrets.token_urlsafe(18)


def check_supported(request: ChatCompletionRequest) -> None:
    """Refuse what we cannot honour, instead of silently doing something else."""
    if request.n is not None and request.n > 1:
        raise ApiError(400, "n > 1 is not supported; send one request per choice", param="n")
    if request.tools:
        raise ApiError(
            400,
            "client-defined tools are not supported yet; Courier runs its own tools server-side",
            param="tools",
            code="unsupported_parameter",
        )
    for i, message in enumerate(request.messages):
        if message.role == "function":
            raise ApiError(
                400, "the legacy 'function' role is not supported", param=f"messages[{i}].role"
            )
        if message.has_non_text_parts():
            raise ApiError(
                400, "only text content parts are supported", param=f"messages[{i}].content"
            )
    if request.messages[-1].role != "user":
        raise ApiError(400, "the last message must be a user message", param="messages")
    if ignored := request.ignored_fields():
        log.info("ignoring unsupported request fields: %s", ", ".join(ignored))


def history_rows(messages: list[ChatMessageIn]) -> list[NewMessage]:
    """Client-supplied history as log rows; system/developer messages go to the prompt."""
    rows: list[NewMessage] = []
    for m in messages:
        if m.role == "user":
            rows.append(NewMessage(role="user", content=m.text()))
        elif m.role == "assistant":
            calls = [
                {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                for c in m.tool_calls or []
            ]
            if m.text() or calls:
                rows.append(
                    NewMessage(role="assistant", content=m.text() or None, tool_calls=calls)
                )
        elif m.role == "tool":
            rows.append(
                NewMessage(
                    role="tool", content=m.text(), tool_call_id=m.tool_call_id, tool_name=m.name
                )
            )
    return rows


def trailing_user_rows(messages: list[ChatMessageIn]) -> list[NewMessage]:
    """With a session the server log is the truth: only the new trailing user turns count."""
    tail: list[NewMessage] = []
    for m in reversed(messages):
        if m.role != "user":
            break
        tail.append(NewMessage(role="user", content=m.text()))
    return list(reversed(tail))


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
    ) -> None:
        self.metrics = metrics
        self.prefixes = StablePrefixRegistry()
        self.compressor = Compressor(prefixes=self.prefixes)
        self.settings = settings
        self.store = store
        self.turns = turns
        self.tools = tools
        self.providers = providers
        self.profiles = {p.name: p for p in settings.all_profiles()}

    def resolve_profile(self, model: str) -> Profile:
        if model in self.profiles:
            return self.profiles[model]
        for profile in self.profiles.values():
            if profile.accept_any_model:
                return profile
        raise ApiError(
            404, f"the model '{model}' does not exist", param="model", code="model_not_found"
        )

    def start(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        session_id: str | None,
        *,
        idempotency: tuple[str, str] | None = None,
    ) -> StartedTurn:
        """Validate, refuse what caps forbid before writing anything, then start the turn.

        `idempotency` is (key, digest of the request body): a retry carrying a key seen
        recently reattaches to that turn instead of running its side effects again.
        """
        check_supported(request)
        profile = self.resolve_profile(request.model)
        if idempotency is not None and (seen := self.turns.find(principal.owner, idempotency[0])):
            if seen.request_digest != idempotency[1]:
                raise ApiError(
                    409,
                    "this Idempotency-Key was used for a different request",
                    param="Idempotency-Key",
                    code="idempotency_key_reused",
                )
            return StartedTurn(handle=seen, session_id=seen.session_id, profile=profile)
        session = self._owned_session(principal, session_id) if session_id else None
        owner = session.owner if session else principal.owner
        spend = self.spend_guard(request, profile, owner=owner, session=session)
        if (refusal := spend.check()) is not None:
            raise ApiError(refusal.status, refusal.message, code=refusal.code, type_=refusal.type)
        if session is None:
            sid, lease = self._new_session(request, principal, profile)
        else:
            sid, lease = self._continue_session(request, session)
        try:
            ctx = self._context(request, profile, sid, owner, lease, spend)
            handle = self.turns.start(lambda _handle: ctx)
            if idempotency is not None:
                self.turns.remember(handle, principal.owner, *idempotency)
        except BaseException:
            self.store.release_lease(session_id=sid, lease=lease)
            raise
        return StartedTurn(handle=handle, session_id=sid, profile=profile)

    def _owned_session(self, principal: Principal, session_id: str) -> SessionRow:
        session = self.store.get_session(session_id=session_id)
        # Another key's session answers exactly like a missing one: no existence oracle.
        if (
            session is None
            or (session.owner != principal.owner and not principal.admin)
            or is_retracted(self.store, session_id=session_id)
        ):
            raise ApiError(
                404,
                f"session '{session_id}' not found",
                param="session_id",
                code="session_not_found",
            )
        if session.profile not in self.profiles:
            raise ApiError(
                409, "the session's profile is no longer configured", code="profile_gone"
            )
        return session

    def _new_session(
        self, request: ChatCompletionRequest, principal: Principal, profile: Profile
    ) -> tuple[str, str]:
        session_id = new_session_id()
        instructions = [m.text() for m in request.messages if m.role in ("system", "developer")]
        snapshot = snapshot_tools(self.tools, profile.toolsets)
        prompt = self.session_prompt(
            profile,
            session_id=session_id,
            owner=principal.owner,
            started_at=time.time(),
            instructions=instructions,
            snapshot=snapshot,
        )
        lease = new_lease_token()
        self.store.create_session(
            session_id=session_id,
            owner=principal.owner,
            profile=profile.name,
            system_prompt=prompt,
            tool_snapshot=snapshot,
            client_instructions=instructions,
            lease=lease,
            lease_ttl_s=LEASE_TTL_S,
            messages=history_rows(request.messages),
        )
        return session_id, lease

    def _continue_session(
        self, request: ChatCompletionRequest, session: SessionRow
    ) -> tuple[str, str]:
        try:
            lease = self.turns.new_lease(session.id)
        except SessionBusy:
            raise ApiError(
                409, "a turn is already running on this session", code="session_busy"
            ) from None
        try:
            closed = close_unanswered_calls(
                self.store,
                session_id=session.id,
                lease=lease,
                turn_id=None,
                result=INTERRUPTED_RESULT,
            )
            if closed:
                log.warning("session %s: closed %d interrupted tool call(s)", session.id, closed)
            self.store.append_messages(
                session_id=session.id,
                lease=lease,
                turn_id=None,
                messages=trailing_user_rows(request.messages),
            )
        except BaseException:
            self.store.release_lease(session_id=session.id, lease=lease)
            raise
        return session.id, lease

    def _context(
        self,
        request: ChatCompletionRequest,
        profile: Profile,
        session_id: str,
        owner: str,
        lease: str,
        spend: SpendGuard,
    ) -> TurnContext:
        session = self.store.get_session(session_id=session_id)
        assert session is not None
        snapshot = session.tool_snapshot
        if missing := [n for n in snapshot_names(snapshot) if self.tools.get(n) is None]:
            snapshot = rebuild_tool_snapshot(
                self.store,
                session_id=session_id,
                lease=lease,
                registry=self.tools,
                toolsets=profile.toolsets,
                why=f"tools no longer registered: {', '.join(missing)}",
            )
        stable = stable_tier(profile, snapshot_names(snapshot))
        return TurnContext(
            store=self.store,
            provider=self.providers[profile.name],
            tools=self.tools,
            profile=profile,
            session_id=session_id,
            owner=owner,
            system_prompt=session.system_prompt,
            lease=lease,
            turn_id="",
            workspace=self.workspace_for(profile, session_id),
            sampling=SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p,
                stop=request.stop_list(),
                max_tokens=request.output_limit(),
            ),
            emit=lambda _event: None,
            spend=spend,
            price_override=price_override(profile),
            metrics=self.metrics,
            tool_specs=specs_from_snapshot(snapshot),
            stable_len=recover_stable_boundary(session.system_prompt, stable),
            prefixes=self.prefixes,
            compressor=self.compressor,
            rebuild_prompt=lambda: self.session_prompt(
                profile,
                session_id=session.id,
                owner=session.owner,
                started_at=session.started_at,
                instructions=json.loads(session.client_instructions),
                snapshot=snapshot,
            ),
        )

    def session_prompt(
        self,
        profile: Profile,
        *,
        session_id: str,
        owner: str,
        started_at: float,
        instructions: list[str],
        snapshot: str,
    ) -> str:
        """The session's system prompt from its inputs: at creation, and again only when a
        compaction has broken the cache anyway."""
        return build_prompt(
            profile=profile,
            client_instructions=instructions,
            session_id=session_id,
            started_at=started_at,
            tool_names=snapshot_names(snapshot),
            workspace=self.workspace_for(profile, session_id),
            memory=self.memory_snapshot(owner, profile),
        ).render()

    def memory_snapshot(self, owner: str, profile: Profile) -> str:
        """The principal's notes, frozen into the new session's volatile tier."""
        if "memory" not in profile.toolsets:
            return ""
        return memory_snapshot(self.store, owner=owner)

    def workspace_for(self, profile: Profile, session_id: str) -> Path:
        path = profile.workspace or self.settings.data_dir / "workspaces" / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def spend_guard(
        self,
        request: ChatCompletionRequest,
        profile: Profile,
        *,
        owner: str,
        session: SessionRow | None,
    ) -> SpendGuard:
        """Every cap that applies to this turn, with what was spent against it so far."""
        s = self.settings
        caps: list[Cap] = []
        if request.max_cost_usd is not None:
            caps.append(Cap("request", Decimal(str(request.max_cost_usd)), Decimal(0)))
        if s.spend_cap_session_usd is not None:
            spent = Decimal(session.cost_usd) if session else Decimal(0)
            caps.append(Cap("session", s.spend_cap_session_usd, spent))
        # Key caps bill the session's owner, even when an admin key drives the turn.
        if s.spend_cap_key_usd is not None:
            spent, _ = self.store.spent_by_owner(owner=owner)
            caps.append(Cap("API key", s.spend_cap_key_usd, spent))
        if s.spend_cap_key_daily_usd is not None:
            spent, _ = self.store.spent_by_owner(owner=owner, since=time.time() - DAY_S)
            caps.append(Cap("API key (24h)", s.spend_cap_key_daily_usd, spent))
        if not caps:
            return SpendGuard([])
        # Refuse up front when spend cannot be tracked: a cap on an unpriced model would
        # otherwise let a whole upstream call run before the first unknown cost shows up.
        probe = price_usage(
            Usage(input_tokens=1, output_tokens=1),
            model=profile.model,
            provider=profile.provider,
            override=price_override(profile),
        )
        return SpendGuard(
            caps, allow_unpriced=profile.allow_unpriced, priced=probe.status != "unknown"
        )


def price_override(profile: Profile) -> PriceOverride | None:
    p = profile.prices
    if p is None:
        return None
    return PriceOverride(
        input_per_mtok=p.input_per_mtok,
        output_per_mtok=p.output_per_mtok,
        cache_read_per_mtok=p.cache_read_per_mtok,
        cache_write_per_mtok=p.cache_write_per_mtok,
        included=p.included,
    )
