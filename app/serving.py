"""The chat serving object: validated request in, a running turn (or an ApiError) out.

Routes only map what this returns to HTTP; the agent never sees HTTP. One request goes:
refuse what cannot be honoured -> resolve the profile -> reattach a retry to its twin ->
find the session (header, or the conversation the client resent) -> append the new part
of the conversation -> start the turn.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from app.agent.budget import Cap, SpendGuard
from app.agent.cache_planner import StablePrefixRegistry
from app.agent.compressor import Compressor
from app.agent.continuity import VisibleMessage, chain, extend, scope_seed
from app.agent.events import ClientToolCalls, TurnEvent, TurnFinished, TurnText
from app.agent.fallback import Route
from app.agent.live_projection import projections_for
from app.agent.loop import TurnContext
from app.agent.projection import INTERRUPTED_RESULT
from app.agent.prompt import build_prompt, stable_tier
from app.agent.relay import RelayInput, run_relay
from app.agent.repair import close_unanswered_calls
from app.agent.structured import schema_problem
from app.agent.tool_snapshot import (
    rebuild_tool_snapshot,
    snapshot_names,
    snapshot_tools,
    specs_from_snapshot,
)
from app.agent.turns import (
    LEASE_TTL_S,
    OnFinish,
    SessionBusy,
    TurnHandle,
    TurnManager,
    new_lease_token,
)
from app.config import Profile, Settings
from app.conversation import (
    Conversation,
    client_specs,
    new_tail,
    rows_for,
    serialise_client_specs,
    split,
    visible,
)
from app.db.chat_store import (
    TranscriptKey,
    find_continuations,
    index_transcript,
    last_row_id,
    put_images,
    retract_after,
)
from app.db.models import SessionRow
from app.db.session_query import is_retracted
from app.db.store import NewMessage, Store
from app.durable_idempotency import DurableKeys
from app.metrics import Metrics
from app.protocol.errors import ApiError
from app.protocol.fields import ignored_fields, refuse_unsupported
from app.protocol.openai import ChatCompletionRequest, ChatMessageIn
from app.providers.base import OutputFormat, Provider, SamplingParams, ToolChoice, ToolSpec
from app.providers.pricing import PriceOverride, price_usage
from app.providers.usage import Usage
from app.security.approvals import ApprovalGate
from app.security.auth import Principal, key_spend_caps
from app.tools.memory import memory_snapshot
from app.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

DAY_S = 24 * 3600
CLIENT_TOOLS_CHANGED = "client_tools_changed"
INSTRUCTIONS_CHANGED = "client_instructions_changed"


@dataclass(frozen=True, slots=True)
class Retry:
    """How this request relates to an earlier one: an explicit key, or the implicit
    signals every client sends (a byte-identical body, the SDK's retry counter)."""

    digest: str
    key: str | None = None
    marked: bool = False


@dataclass(frozen=True, slots=True)
class StartedTurn:
    handle: TurnHandle
    session_id: str
    profile: Profile
    ignored: tuple[str, ...] = ()


@dataclass(slots=True)
class Placement:
    """Where the request's new messages go: a session, its lease, and what to append."""

    session: SessionRow
    lease: str
    new: list[ChatMessageIn]
    offset: int
    head: str | None
    position: int
    created: bool = False
    keys: list[TranscriptKey] = field(default_factory=list)


def new_session_id() -> str:
    # Random, never derived from content: two users sending the same first message must
    # not land in one session.
    return "sess_" + secrets.token_urlsafe(18)


def output_format(request: ChatCompletionRequest) -> OutputFormat | None:
    fmt = request.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return OutputFormat("json_object")
    spec = fmt.json_schema
    if spec is None or spec.schema_ is None:
        raise ApiError(
            400,
            "response_format json_schema needs json_schema.schema",
            param="response_format.json_schema",
        )
    if (problem := schema_problem(spec.schema_)) is not None:
        raise ApiError(
            400,
            f"response_format schema is not a valid JSON schema: {problem}",
            param="response_format.json_schema.schema",
        )
    return OutputFormat("json_schema", spec.schema_, spec.name, bool(spec.strict))


def tool_choice(request: ChatCompletionRequest, known: set[str]) -> ToolChoice:
    choice = request.tool_choice
    if choice is None:
        return "auto"
    if isinstance(choice, str):
        return choice
    if choice.function.name not in known:
        raise ApiError(
            400,
            f"tool_choice names '{choice.function.name}', which is not a declared tool",
            param="tool_choice",
        )
    return choice.function.name


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
        self.approvals = approvals
        self.metrics = metrics
        self.durable = durable
        self.prefixes = StablePrefixRegistry()
        self.compressor = Compressor(prefixes=self.prefixes)
        self.settings = settings
        self.store = store
        self.turns = turns
        self.tools = tools
        self.providers = providers
        self.profiles = {p.name: p for p in settings.all_profiles()}
        self.aliases = {a: p for p in self.profiles.values() for a in p.aliases}

    def resolve_profile(self, model: str) -> Profile:
        if model in self.profiles:
            return self.profiles[model]
        if model in self.aliases:
            return self.aliases[model]
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
        retry: Retry,
    ) -> StartedTurn:
        """Validate, refuse what caps forbid before writing anything, then start the turn."""
        refuse_unsupported(request)
        profile = self.resolve_profile(request.model)
        provider = self.providers[profile.name]
        ignored = tuple(ignored_fields(request, passthrough=provider.passthrough))
        if (seen := self._twin(principal, retry)) is not None:
            return StartedTurn(seen, seen.session_id, profile, ignored)
        conversation = split(request)
        self._refuse_prefill(conversation, profile, provider)
        fmt = output_format(request)
        specs = client_specs(request)
        if profile.relay:
            handle = self._start_relay(request, principal, profile, conversation, specs, fmt)
        else:
            handle = self._start_agent(request, principal, session_id, profile, conversation, fmt)
        if retry.key is not None:
            self.turns.remember(handle, principal.owner, retry.key, retry.digest)
            if self.durable is not None:
                owner, key, digest = principal.owner, retry.key, retry.digest
                self.durable.started(handle, owner=owner, key=key, digest=digest)
        self.turns.remember_twin(handle, principal.owner, retry.digest)
        return StartedTurn(handle, handle.session_id, profile, ignored)

    def _twin(self, principal: Principal, retry: Retry) -> TurnHandle | None:
        if retry.key is not None and (seen := self.turns.find(principal.owner, retry.key)):
            if seen.request_digest != retry.digest:
                raise ApiError(
                    409,
                    "this Idempotency-Key was used for a different request",
                    param="Idempotency-Key",
                    code="idempotency_key_reused",
                )
            if seen.cancelled:
                # Never replay a cancelled turn as an empty success.
                raise ApiError(
                    409,
                    "the turn started with this Idempotency-Key was cancelled before it "
                    "finished; send the request with a new key to run it again",
                    param="Idempotency-Key",
                    code="turn_cancelled",
                    headers={"x-should-retry": "false"},
                )
            return seen
        if retry.key is not None and self.durable is not None:
            owner, key = principal.owner, retry.key
            if replayed := self.durable.replay(owner=owner, key=key, digest=retry.digest):
                self.turns.remember(replayed, owner, key, retry.digest)
                return replayed
        return self.turns.find_twin(principal.owner, retry.digest, marked_retry=retry.marked)

    @staticmethod
    def _refuse_prefill(conversation: Conversation, profile: Profile, provider: Provider) -> None:
        rest = conversation.rest
        if not rest or rest[-1].role != "assistant" or rest[-1].tool_calls:
            return
        if profile.prefill if profile.prefill is not None else provider.prefill:
            return
        raise ApiError(
            400,
            "a trailing assistant message asks to continue (prefill) that answer, which this "
            "profile's upstream does not support; end the conversation with a user message",
            param=f"messages[{conversation.offset + len(rest) - 1}]",
            code="prefill_unsupported",
        )

    # ------------------------------------------------------------------ agent turns

    def _start_agent(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        session_id: str | None,
        profile: Profile,
        conversation: Conversation,
        fmt: OutputFormat | None,
    ) -> TurnHandle:
        session = self._owned_session(principal, session_id) if session_id else None
        owner = session.owner if session else principal.owner
        spend = self.spend_guard(request, profile, owner=owner, session=session)
        if (refusal := spend.check()) is not None:
            raise ApiError(refusal.status, refusal.message, code=refusal.code, type_=refusal.type)
        seed = scope_seed(
            owner=owner,
            profile=profile.name,
            end_user=request.user or request.safety_identifier,
        )
        # One transaction from here to the turn row (session or continuation, messages,
        # lease): this span never awaits, and a failure leaves nothing half-made.
        with self.store.unit():
            place = self._place(request, principal, profile, conversation, session, seed)
            try:
                self._append(place, conversation)
                specs = client_specs(request)
                handle = self.turns.start(
                    lambda turn_id, emit: self._context(
                        request,
                        profile,
                        place,
                        owner,
                        spend,
                        specs,
                        fmt,
                        turn_id=turn_id,
                        emit=emit,
                    ),
                    on_finish=self._indexer(place, seed),
                )
            except BaseException:
                self.store.release_lease(session_id=place.session.id, lease=place.lease)
                raise
        return handle

    def _place(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        profile: Profile,
        conversation: Conversation,
        session: SessionRow | None,
        seed: str,
    ) -> Placement:
        rest = conversation.rest
        if session is not None:
            lease = self._lease(session.id)
            start = new_tail(rest)
            return Placement(
                session,
                lease,
                rest[start:],
                conversation.offset + start,
                session.transcript_head,
                session.transcript_len,
            )
        implicit = profile.implicit_sessions and self.settings.implicit_sessions
        if implicit and (found := self._continuation(conversation, seed)) is not None:
            return found
        return self._new_session(request, principal, profile, conversation, seed)

    def _continuation(self, conversation: Conversation, seed: str) -> Placement | None:
        """The stored conversation this request resends, continued from the longest prefix
        they share; the stored rows past it (an edited or regenerated message, an answer
        the client only partly heard) are retracted and the client's version recorded."""
        rest = conversation.rest
        at = conversation.offset
        seen = [
            (i, v)
            for i, m in enumerate(rest)
            if (v := visible(m, param=f"messages[{at + i}].content")) is not None
        ]
        hashes = chain(seed, [v for _, v in seen])
        candidates = find_continuations(self.store, hashes=hashes)
        # Longest shared prefix first, but a conversation the request simply extends beats
        # a longer one it would have to rewrite: two look-alike conversations each keep
        # their own next message.
        match = next((c for c in candidates if c.stored_len == c.position), None)
        match = match or (candidates[0] if candidates else None)
        if match is None:
            return None
        # Only an answer of ours in the history identifies a conversation: two chats that
        # merely open with the same words ("hi") are two conversations. A history whose
        # first answer differs from ours (a voice client resends the part it spoke) still
        # carries one, so it continues from the shared opening.
        if not any(v.role == "assistant" for _, v in seen):
            return None
        session = self.store.get_session(session_id=match.session_id)
        if session is None or session.profile not in self.profiles:
            return None
        lease = self._lease(session.id)
        try:
            head = hashes[match.position - 1]
            diverged = session.transcript_len > match.position or (
                last_row_id(self.store, session_id=session.id) > match.last_row_id
            )
            if diverged:
                if match.compactions != session.compactions:
                    # A compaction re-inserted rows since: ids no longer order the log, so
                    # the diverged branch cannot be retracted safely. Start afresh.
                    self.store.release_lease(session_id=session.id, lease=lease)
                    return None
                retracted = retract_after(
                    self.store,
                    session_id=session.id,
                    lease=lease,
                    after_row_id=match.last_row_id,
                    keep_position=match.position,
                    head=head,
                )
                log.info(
                    "session %s: the client's history diverges after message %d; "
                    "%d stored row(s) retracted",
                    session.id,
                    match.position,
                    retracted,
                )
            start = seen[match.position - 1][0] + 1
            refreshed = self.store.get_session(session_id=session.id)
            assert refreshed is not None
        except BaseException:
            self.store.release_lease(session_id=session.id, lease=lease)
            raise
        return Placement(
            refreshed, lease, rest[start:], conversation.offset + start, head, match.position
        )

    def _new_session(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        profile: Profile,
        conversation: Conversation,
        seed: str,
    ) -> Placement:
        session_id = new_session_id()
        snapshot = snapshot_tools(self.tools, profile.toolsets)
        prompt = self.session_prompt(
            profile,
            session_id=session_id,
            owner=principal.owner,
            started_at=time.time(),
            instructions=conversation.instructions,
            snapshot=snapshot,
        )
        lease = new_lease_token()
        session = self.store.create_session(
            session_id=session_id,
            owner=principal.owner,
            profile=profile.name,
            system_prompt=prompt,
            tool_snapshot=snapshot,
            client_tools=serialise_client_specs(client_specs(request)),
            client_instructions=conversation.instructions,
            lease=lease,
            lease_ttl_s=LEASE_TTL_S,
        )
        return Placement(
            session, lease, conversation.rest, conversation.offset, seed, 0, created=True
        )

    def _lease(self, session_id: str) -> str:
        try:
            return self.turns.new_lease(session_id)
        except SessionBusy:
            raise ApiError(
                409,
                "a turn is already running on this session",
                code="session_busy",
                headers={"Retry-After": "1", "X-Session-Id": session_id},
            ) from None

    def _append(self, place: Placement, conversation: Conversation) -> None:
        """Append the request's new messages, after closing calls nobody will answer."""
        session = place.session
        rows, images = rows_for(place.new, offset=place.offset)
        if not place.created:
            self._close_open_calls(place, rows)
        put_images(self.store, session_id=session.id, images=images)
        ids = self.store.append_messages(
            session_id=session.id, lease=place.lease, turn_id=None, messages=rows
        )
        self._track_visible(place, rows, ids)
        if conversation.instructions and not place.created:
            self._refresh_instructions(place, conversation.instructions)

    def _close_open_calls(self, place: Placement, rows: list[NewMessage]) -> None:
        """Results the request brings must answer open calls; every other open call (a
        crash, a client that moved on) is closed before new messages land after it."""
        session = place.session
        answered = {r.tool_call_id for r in rows if r.role == "tool"}
        live = self.store.active_messages(session_id=session.id)
        open_ids = {cid for cid, _ in projections_for(self.store).unanswered(session.id, live)}
        for i, row in enumerate(rows):
            if row.role == "tool" and row.tool_call_id not in open_ids:
                raise ApiError(
                    400,
                    f"tool result for '{row.tool_call_id}', which is not an open tool call "
                    "of this conversation",
                    param=f"messages[{place.offset + i}].tool_call_id",
                    code="unknown_tool_call",
                )
        closed = close_unanswered_calls(
            self.store,
            session_id=session.id,
            lease=place.lease,
            turn_id=None,
            result=INTERRUPTED_RESULT,
            keep=answered,
        )
        if closed:
            log.warning("session %s: closed %d interrupted tool call(s)", session.id, closed)

    def _track_visible(self, place: Placement, rows: list[NewMessage], ids: list[int]) -> None:
        """Chain the new visible messages onto the session's transcript index."""
        head = place.head or ""
        for row, row_id in zip(rows, ids, strict=True):
            message = _visible_row(row)
            if message is None or not head:
                continue
            head = extend(head, message)
            place.position += 1
            place.keys.append(TranscriptKey(head, place.position, row_id))
        place.head = head or None
        if place.keys:
            index_transcript(
                self.store,
                session_id=place.session.id,
                keys=place.keys,
                head=head,
                length=place.position,
            )

    def _refresh_instructions(self, place: Placement, instructions: list[str]) -> None:
        """The client changed its system prompt: rebuild ours from it, a named cache break
        (an app that keeps its instructions keeps its cache)."""
        session = place.session
        if json.loads(session.client_instructions) == instructions:
            return
        profile = self.profiles[session.profile]
        prompt = self.session_prompt(
            profile,
            session_id=session.id,
            owner=session.owner,
            started_at=session.started_at,
            instructions=instructions,
            snapshot=session.tool_snapshot,
        )
        values = {"client_instructions": json.dumps(instructions), "system_prompt": prompt}
        self.store.set_client_context(
            session_id=session.id,
            lease=place.lease,
            values=values,
            cache_break=INSTRUCTIONS_CHANGED,
        )
        session.client_instructions, session.system_prompt = values.values()
        log.info("session %s: client instructions changed; prompt rebuilt", session.id)

    def _indexer(self, place: Placement, seed: str) -> OnFinish:
        """After the turn: chain the answer the client received onto the index."""
        session_id = place.session.id

        def index(handle: TurnHandle, finished: TurnFinished) -> None:
            if finished.error is not None or finished.exit_reason == "cancelled":
                return
            head = place.head or seed
            answer = _visible_answer(handle)
            head = extend(head, answer)
            position = place.position + 1
            last = last_row_id(self.store, session_id=session_id)
            index_transcript(
                self.store,
                session_id=session_id,
                keys=[TranscriptKey(head, position, last)],
                head=head,
                length=position,
            )

        return index

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

    def _tool_specs(
        self, profile: Profile, place: Placement, client: tuple[ToolSpec, ...]
    ) -> tuple[ToolSpec, ...]:
        """The session's frozen server tools beside the client's; a client tool with a
        server tool's name shadows it for this request."""
        session = place.session
        snapshot = session.tool_snapshot
        if missing := [n for n in snapshot_names(snapshot) if self.tools.get(n) is None]:
            snapshot = rebuild_tool_snapshot(
                self.store,
                session_id=session.id,
                lease=place.lease,
                registry=self.tools,
                toolsets=profile.toolsets,
                why=f"tools no longer registered: {', '.join(missing)}",
            )
            session.tool_snapshot = snapshot
        serialised = serialise_client_specs(client)
        if serialised != session.client_tools and not place.created:
            self.store.set_client_context(
                session_id=session.id,
                lease=place.lease,
                values={"client_tools": serialised},
                cache_break=CLIENT_TOOLS_CHANGED,
            )
            log.info("session %s: the client's tool set changed (a cache break)", session.id)
        names = {spec.name for spec in client}
        server = specs_from_snapshot(snapshot)
        if shadowed := sorted(names & {s.name for s in server}):
            log.info("session %s: client tools shadow server tools: %s", session.id, shadowed)
        return (*(s for s in server if s.name not in names), *client)

    def _context(
        self,
        request: ChatCompletionRequest,
        profile: Profile,
        place: Placement,
        owner: str,
        spend: SpendGuard,
        client: tuple[ToolSpec, ...],
        fmt: OutputFormat | None,
        *,
        turn_id: str,
        emit: Callable[[TurnEvent], None],
    ) -> TurnContext:
        session = place.session
        specs = self._tool_specs(profile, place, client)
        choice = tool_choice(request, {s.name for s in specs})
        return TurnContext(
            store=self.store,
            provider=self.providers[profile.name],
            # The snapshot is the allowlist: a hidden tool is an unknown tool to this turn.
            tools=self.tools.restricted_to(snapshot_names(session.tool_snapshot)),
            profile=profile,
            session_id=session.id,
            owner=owner,
            lease=place.lease,
            turn_id=turn_id,
            workspace=self.workspace_for(profile, session.id),
            sampling=sampling(request),
            emit=emit,
            spend=spend,
            price_override=price_override(profile),
            metrics=self.metrics,
            tool_specs=specs,
            stable_tier=stable_tier(profile, snapshot_names(session.tool_snapshot)),
            prefixes=self.prefixes,
            compressor=self.compressor,
            gate=self.approvals,
            rebuild_prompt=lambda: self.session_prompt(
                profile,
                session_id=session.id,
                owner=session.owner,
                started_at=session.started_at,
                instructions=json.loads(session.client_instructions),
                snapshot=session.tool_snapshot,
            ),
            client_tools=frozenset(s.name for s in client),
            tool_choice=choice,
            parallel_tool_calls=request.parallel_tool_calls,
            output_format=fmt,
            fallbacks=self.fallback_routes(profile),
        )

    def fallback_routes(self, profile: Profile) -> tuple[Route, ...]:
        return tuple(
            Route(self.profiles[n], self.providers[n], price_override(self.profiles[n]))
            for n in profile.fallback
        )

    # ------------------------------------------------------------------ relay turns

    def _start_relay(
        self,
        request: ChatCompletionRequest,
        principal: Principal,
        profile: Profile,
        conversation: Conversation,
        specs: tuple[ToolSpec, ...],
        fmt: OutputFormat | None,
    ) -> TurnHandle:
        """A plain relay: no tools of ours, nothing kept but the usage ledger (one
        bookkeeping session per principal and profile holds its rows)."""
        spend = self.spend_guard(request, profile, owner=principal.owner, session=None)
        if (refusal := spend.check()) is not None:
            raise ApiError(refusal.status, refusal.message, code=refusal.code, type_=refusal.type)
        ledger_id = self._relay_ledger(principal, profile)
        rows, images = rows_for(conversation.rest, offset=conversation.offset)
        relay = RelayInput(
            store=self.store,
            provider=self.providers[profile.name],
            profile=profile,
            ledger_session=ledger_id,
            owner=principal.owner,
            instructions=tuple(conversation.instructions),
            rows=tuple(rows),
            images={i.sha256: i for i in images},
            tools=specs,
            tool_choice=tool_choice(request, {s.name for s in specs}),
            parallel_tool_calls=request.parallel_tool_calls,
            output_format=fmt,
            sampling=sampling(request),
            spend=spend,
            price_override=price_override(profile),
            metrics=self.metrics,
        )
        return self.turns.start_task(
            ledger_id, lambda handle: run_relay(relay, handle), profile=profile.name
        )

    def _relay_ledger(self, principal: Principal, profile: Profile) -> str:
        ledger_id = f"relay_{principal.owner[:16]}_{profile.name}"[:128]
        if self.store.get_session(session_id=ledger_id) is None:
            try:
                self.store.create_session(
                    session_id=ledger_id,
                    owner=principal.owner,
                    profile=profile.name,
                    system_prompt="",
                )
            except Exception:
                # A concurrent first relay request created it: that is all we needed.
                if self.store.get_session(session_id=ledger_id) is None:
                    raise
        return ledger_id

    # ------------------------------------------------------------------ helpers

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
        compaction or changed client instructions have broken the cache anyway."""
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
        # A `[[keys]]` entry's own caps win over the global per-key caps.
        own_total, own_daily = key_spend_caps(s.keys).get(owner, (None, None))
        key_total = own_total if own_total is not None else s.spend_cap_key_usd
        key_daily = own_daily if own_daily is not None else s.spend_cap_key_daily_usd
        if key_total is not None:
            spent, _ = self.store.spent_by_owner(owner=owner)
            caps.append(Cap("API key", key_total, spent))
        if key_daily is not None:
            spent, _ = self.store.spent_by_owner(owner=owner, since=time.time() - DAY_S)
            caps.append(Cap("API key (24h)", key_daily, spent))
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


def sampling(request: ChatCompletionRequest) -> SamplingParams:
    return SamplingParams(
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop_list(),
        max_tokens=request.output_limit(),
        seed=request.seed,
        frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty,
        logit_bias=tuple(sorted((request.logit_bias or {}).items())),
        reasoning_effort=request.reasoning_effort,
        service_tier=request.service_tier,
        user=request.user or request.safety_identifier,
        metadata=tuple(sorted((request.metadata or {}).items())),
    )


def _visible_row(row: NewMessage) -> VisibleMessage | None:
    if row.role == "user":
        return VisibleMessage("user", row.content or "", images=row.images)
    if row.role == "assistant":
        calls = tuple((c["id"], c["name"], c.get("arguments", "")) for c in row.tool_calls or [])
        return VisibleMessage("assistant", row.content or "", calls=calls)
    if row.role == "tool":
        return VisibleMessage("tool", row.content or "", call_id=row.tool_call_id or "")
    return None


def _visible_answer(handle: TurnHandle) -> VisibleMessage:
    """The assistant message exactly as the client received it."""
    text: list[str] = []
    calls: tuple[tuple[str, str, str], ...] = ()
    for event in handle.history():
        if isinstance(event, TurnText):
            text.append(event.text)
        elif isinstance(event, ClientToolCalls):
            calls = tuple((c.id, c.name, c.arguments) for c in event.calls)
    return VisibleMessage("assistant", "".join(text), calls=calls)


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
