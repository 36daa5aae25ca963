"""A session's lifecycle at the start of a turn: find it or create it, take its lease,
repair what a crash left open, append the request's new messages, and build the turn.

One request goes: the session the client named (ownership checked), or the stored
conversation it resends (stateless continuity; within the session its app's name for the
conversation points at, when a session header sends one), or a new one -> the lease ->
open calls nobody will answer closed -> the new messages appended and chained onto the
transcript index -> the turn's context, built whole and frozen. All of it is one
transaction that never awaits: a failure leaves nothing half-made, and the lease is
released.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from app.agent.approvals import ApprovalGate
from app.agent.context.cache_planner import StablePrefixRegistry
from app.agent.context.close_open_calls import close_unanswered_calls, open_calls
from app.agent.context.compressor import Compressor
from app.agent.context.projection import INTERRUPTED_RESULT
from app.agent.context.prompt import stable_tier
from app.agent.cost.budget import SpendGuard
from app.agent.cost.spend_caps import SpendCaps, price_override
from app.agent.events import ClientToolCalls, TurnEvent, TurnFinished, TurnText
from app.agent.opening.continuity import chain, extend, scope_seed
from app.agent.opening.profiles import Profiles
from app.agent.opening.session_setup import SessionSetup
from app.agent.opening.tool_snapshot import (
    EMPTY,
    MCP_TOOLS_CHANGED,
    mcp_portion,
    rebuild_tool_snapshot,
    serialise_specs,
    session_toolsets,
    snapshot_names,
    snapshot_tools,
    specs_from_snapshot,
    with_mcp_portion,
)
from app.agent.refusals import (
    ProfileGone,
    RemoteServerUndeclared,
    ResumeStale,
    SessionNotFound,
    SpendRefused,
    UnknownToolCall,
)
from app.agent.turn_context import TurnContext
from app.agent.turn_request import (
    IncomingMessage,
    ResumePoint,
    TurnRequest,
    VisibleMessage,
    check_tool_choice,
    new_tail,
    refuse_prefill,
)
from app.agent.turns.handle import Placed, TurnHandle
from app.agent.turns.manager import LEASE_TTL_S, OnFinish, TurnManager, new_lease_token
from app.config import Profile
from app.db.chat_store import (
    TranscriptKey,
    find_continuations,
    index_transcript,
    last_row_id,
    name_session,
    named_session,
    put_images,
    retract_after,
)
from app.db.models import SessionRow
from app.db.session_query import is_retracted
from app.db.store import NewMessage, Store
from app.observe.metrics import Metrics
from app.providers.base import ToolCall, ToolSpec
from app.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

CLIENT_TOOLS_CHANGED = "client_tools_changed"
INSTRUCTIONS_CHANGED = "client_instructions_changed"


def new_session_id() -> str:
    # Random, never derived from content: two users sending the same first message must
    # not land in one session.
    return "sess_" + secrets.token_urlsafe(18)


@dataclass(slots=True)
class Placement:
    """Where the request's new messages go: a session, its lease, and what to append."""

    session: SessionRow
    lease: str
    new: tuple[IncomingMessage, ...]
    head: str | None
    position: int
    created: bool = False
    keys: list[TranscriptKey] = field(default_factory=list)
    chained: list[str] | None = None
    """A new session's transcript hashes for its visible messages, in order, computed
    before its row was inserted (which carries the last as its head)."""
    rows: list[NewMessage] | None = None
    """A new session's log rows, built once for its head (None: `_append` builds them from
    `new`). Building every row twice was a tenth of a 10,000-message import's writer time."""
    approved: tuple[ToolCall, ...] = ()
    """Held remote MCP calls the request approves: kept open, run first by the turn."""
    first_id: int | None = None
    """The first row `_append` wrote (None: the request brought none to append)."""


@dataclass(frozen=True, slots=True)
class OpenedTurn:
    """A turn ready to run: its context holds the lease; `on_finish` indexes its answer."""

    context: TurnContext
    on_finish: OnFinish
    placed: Placed


class SessionLifecycle:
    def __init__(
        self,
        *,
        store: Store,
        turns: TurnManager,
        tools: ToolRegistry,
        profiles: Profiles,
        setup: SessionSetup,
        spend: SpendCaps,
        metrics: Metrics,
        implicit_sessions: bool,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self.store = store
        self.turns = turns
        self.tools = tools
        self.profiles = profiles
        self.setup = setup
        self.spend = spend
        self.metrics = metrics
        self.implicit_sessions = implicit_sessions
        self.approvals = approvals
        self.prefixes = StablePrefixRegistry()
        self.compressor = Compressor(prefixes=self.prefixes)

    def owned(
        self,
        *,
        owner: str,
        admin: bool,
        session_id: str,
        end_user: str | None = None,
        param: str = "session_id",
    ) -> SessionRow:
        """The session, if the caller may continue it. A request acting for an end user
        reaches only that end user's sessions; one without an end user, any of its key's
        (the app itself: its end user's turn then runs as that end user)."""
        session = self.store.get_session(session_id=session_id)
        # Another key's (or end user's) session answers exactly like a missing one: no
        # existence oracle.
        if (
            session is None
            or (session.owner != owner and not admin)
            or (end_user is not None and session.end_user != end_user)
            or is_retracted(self.store, session_id=session_id)
        ):
            raise SessionNotFound(session_id, param=param)
        if session.profile not in self.profiles:
            raise ProfileGone(session.profile)
        return session

    def open(
        self, req: TurnRequest, *, turn_id: str, emit: Callable[[TurnEvent], None]
    ) -> OpenedTurn:
        """Place the request, append its messages, record the turn: one transaction."""
        refuse_prefill(req, self.profiles.provider(req.profile))
        session = (
            self.owned(
                owner=req.owner,
                admin=req.admin,
                session_id=req.session_id,
                end_user=req.end_user,
                param=req.session_param,
            )
            if req.session_id
            else None
        )
        owner = session.owner if session else req.owner
        # A named session's end user is the request's, or the request has none and the
        # session's applies (as the key caps bill the session's owner).
        end_user = session.end_user if session else req.end_user or ""
        spend = self.spend.guard(
            req.profile,
            owner=owner,
            end_user=end_user,
            session=session,
            request_cap=req.max_cost_usd,
            hard=req.hard_cap,
        )
        if (refusal := spend.check()) is not None:
            raise SpendRefused(refusal)
        seed = scope_seed(owner=owner, profile=req.profile.name, end_user=req.end_user)
        with self.store.unit():
            place = self._place(req, session, seed)
            try:
                self._append(place, req)
                ctx = self._context(req, place, owner, spend, turn_id=turn_id, emit=emit)
                self.store.start_turn(session_id=ctx.session_id, lease=ctx.lease, turn_id=turn_id)
            except BaseException:
                self.store.release_lease(session_id=place.session.id, lease=place.lease)
                raise
        placed = Placed(created=place.created, first_id=place.first_id)
        return OpenedTurn(ctx, self._indexer(place, seed), placed)

    # ------------------------------------------------------------------ placement

    def _place(self, req: TurnRequest, session: SessionRow | None, seed: str) -> Placement:
        if session is not None:
            start = new_tail(req.messages)
            lease = self.turns.new_lease(session.id)
            new = req.messages[start:]
            return Placement(session, lease, new, session.transcript_head, session.transcript_len)
        if req.resume is not None:
            return self._resumed(req, req.resume)
        named = self._named(req) if req.chat_name else None
        if named is not None and (found := self._continuation(req, seed, within=named)):
            return found
        implicit = req.profile.implicit_sessions and self.implicit_sessions
        place = (self._continuation(req, seed) if implicit else None) or self._new_session(
            req, seed
        )
        if req.chat_name and named is None:
            # The name pointed nowhere (or at a session gone since): it names this one now.
            # A name that points at a live session keeps pointing there: what shares nothing
            # with it is a side request (Open WebUI's title and tag requests carry the chat's
            # id too), not the conversation starting over.
            name_session(
                self.store,
                owner=req.owner,
                end_user=req.end_user or "",
                name=req.chat_name,
                session_id=place.session.id,
            )
        return place

    def _named(self, req: TurnRequest) -> str | None:
        """The live session the app's name for this conversation points at, if any."""
        assert req.chat_name is not None
        found = named_session(
            self.store, owner=req.owner, end_user=req.end_user or "", name=req.chat_name
        )
        if found is None or is_retracted(self.store, session_id=found):
            return None
        return found

    def _continuation(
        self, req: TurnRequest, seed: str, *, within: str | None = None
    ) -> Placement | None:
        """The stored conversation this request resends, continued from the longest prefix
        they share; the stored rows past it (an edited or regenerated message, an answer
        the client only partly heard) are retracted and the client's version recorded.
        `within`: only that session, the one the request's conversation name points at."""
        seen = [(i, m.visible) for i, m in enumerate(req.messages) if m.visible is not None]
        # Only an answer of ours in the history identifies a conversation: two chats that
        # merely open with the same words ("hi") are two conversations. A history whose
        # first answer differs from ours (a voice client resends the part it spoke) still
        # carries one, so it continues from the shared opening. (Checked before the lookup:
        # every first message of a conversation would otherwise pay for one.) A named
        # conversation is identified by its name: a regenerated first answer resends only
        # the first message, and continues it.
        if within is None and not any(v.role == "assistant" for _, v in seen):
            return None
        hashes = chain(seed, [v for _, v in seen])
        candidates = find_continuations(self.store, hashes=hashes, session_id=within)
        # Longest shared prefix first, but a conversation the request simply extends beats
        # a longer one it would have to rewrite: two look-alike conversations each keep
        # their own next message.
        match = next((c for c in candidates if c.stored_len == c.position), None)
        match = match or (candidates[0] if candidates else None)
        if match is None:
            return None
        session = self.store.get_session(session_id=match.session_id)
        if session is None or session.profile not in self.profiles:
            return None
        lease = self.turns.new_lease(session.id)
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
            # The row the lease's taking returned, unless a retraction rewrote it since.
            refreshed = self.store.leased_row(session_id=session.id)
            assert refreshed is not None
        except BaseException:
            self.store.release_lease(session_id=session.id, lease=lease)
            raise
        return Placement(refreshed, lease, req.messages[start:], head, match.position)

    def _resumed(self, req: TurnRequest, point: ResumePoint) -> Placement:
        """The placement a resent history was matched to before translation, if the session
        still stands exactly there: same key, same compactions, nothing stored past it
        (else `ResumeStale`: the full path decides, retracting as `_continuation` does)."""
        found = find_continuations(self.store, hashes=[point.head], session_id=point.session_id)
        match = found[0] if found else None
        session = self.store.get_session(session_id=point.session_id)
        if (
            match is None
            or (match.position, match.last_row_id, match.compactions)
            != (point.position, point.last_row_id, point.compactions)
            or match.stored_len != match.position
            or session is None
            or session.profile not in self.profiles
        ):
            raise ResumeStale
        lease = self.turns.new_lease(session.id)
        try:
            if last_row_id(self.store, session_id=session.id) > match.last_row_id:
                raise ResumeStale
            refreshed = self.store.leased_row(session_id=session.id)
            assert refreshed is not None
        except BaseException:
            self.store.release_lease(session_id=session.id, lease=lease)
            raise
        return Placement(refreshed, lease, req.messages, point.head, point.position)

    def _new_session(self, req: TurnRequest, seed: str) -> Placement:
        session_id = new_session_id()
        profile = req.profile
        snapshot = snapshot_tools(self.tools, session_toolsets(self.tools, profile, req.owner))
        prompt = self.setup.prompt(
            profile,
            session_id=session_id,
            owner=req.owner,
            end_user=req.end_user or "",
            started_at=time.time(),
            instructions=req.instructions,
            snapshot=snapshot,
            new_id=True,
        )
        lease = new_lease_token()
        # The head goes into the session's own insert: moving it after the messages was
        # one more statement in every new session's opening, on its way to the first token.
        rows = [row for m in req.messages if (row := m.row) is not None]
        visible = [v for row in rows if (v := visible_row(row)) is not None]
        chained = chain(seed, visible) if seed else []
        session = self.store.create_session(
            session_id=session_id,
            owner=req.owner,
            end_user=req.end_user or "",
            profile=profile.name,
            system_prompt=prompt,
            tool_snapshot=snapshot,
            client_tools=serialise_specs(declared_specs(req)),
            client_instructions=req.instructions,
            lease=lease,
            lease_ttl_s=LEASE_TTL_S,
            transcript=(chained[-1], len(chained)) if chained else None,
        )
        return Placement(
            session, lease, req.messages, seed, 0, created=True, chained=chained, rows=rows
        )

    # ------------------------------------------------------------------ appending

    def _append(self, place: Placement, req: TurnRequest) -> None:
        """Append the request's new messages, after closing calls nobody will answer."""
        session = place.session
        rows = place.rows
        if rows is None:
            rows = [row for m in place.new if (row := m.row) is not None]
        if not place.created:
            self._close_open_calls(place, req)
        put_images(
            self.store, session_id=session.id, images=[i for m in place.new for i in m.images]
        )
        ids = self.store.append_messages(
            session_id=session.id, lease=place.lease, turn_id=None, messages=rows
        )
        place.first_id = ids[0] if ids else None
        self._track_visible(place, rows, ids)
        if req.instructions and not place.created:
            self._refresh_instructions(place, req.instructions)

    def _close_open_calls(self, place: Placement, req: TurnRequest) -> None:
        """Results the request brings must answer open calls; every other open call (a
        crash, a client that moved on) is closed before new messages land after it."""
        session = place.session
        # `row` builds the row each time it is read: once per message here.
        results = [(m, row) for m in place.new if m.role == "tool" and (row := m.row)]
        answered: set[str | None] = {row.tool_call_id for _, row in results}
        unanswered = open_calls(self.store, session.id)
        open_ids = {cid for cid, _ in unanswered}
        if stray := [(m, row) for m, row in results if row.tool_call_id not in open_ids]:
            # A resent history may carry a call and its result together, past the point
            # the stored conversation shares with it: that result answers a call too.
            made = {c["id"] for m in place.new if m.role == "assistant" for c in _calls_of(m)}
            for m, row in stray:
                if row.tool_call_id not in made:
                    raise UnknownToolCall(row.tool_call_id, param=m.call_param)
        if req.remote.approved:
            place.approved = self._approved_calls(place, req, open_ids)
            answered |= {call.id for call in place.approved}
        closed = close_unanswered_calls(
            self.store,
            session_id=session.id,
            lease=place.lease,
            turn_id=None,
            result=INTERRUPTED_RESULT,
            keep=answered,
            unanswered=unanswered,
        )
        if closed:
            log.warning("session %s: closed %d interrupted tool call(s)", session.id, closed)

    def _approved_calls(
        self, place: Placement, req: TurnRequest, open_ids: set[str]
    ) -> tuple[ToolCall, ...]:
        """The held calls the request approves, as the model made them; each must be open
        and its server declared again by this request (tools are not inherited)."""
        made = {
            call["id"]: call
            for row in self.store.active_messages(session_id=place.session.id)
            if row.role == "assistant"
            for call in row.tool_calls
        }
        approved: list[ToolCall] = []
        for call_id, param in req.remote.approved:
            call = made.get(call_id)
            if call_id not in open_ids or call is None:
                raise UnknownToolCall(call_id, param=param)
            if call["name"] not in req.remote.named:
                raise RemoteServerUndeclared(call["name"], param=param)
            approved.append(ToolCall(call_id, call["name"], call.get("arguments", "")))
        return tuple(approved)

    def _track_visible(self, place: Placement, rows: list[NewMessage], ids: list[int]) -> None:
        """Chain the new visible messages onto the session's transcript index."""
        head = place.head or ""
        chained = iter(place.chained) if place.chained is not None else None
        for row, row_id in zip(rows, ids, strict=True):
            message = visible_row(row)
            if message is None or not head:
                continue
            head = next(chained) if chained is not None else extend(head, message)
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
                move_head=place.chained is None,
            )
            # The placement's row follows the write: a new session's turn starts from it.
            place.session.transcript_head = head
            place.session.transcript_len = place.position

    def _refresh_instructions(self, place: Placement, instructions: tuple[str, ...]) -> None:
        """The client changed its system prompt: rebuild ours from it, a named cache break
        (an app that keeps its instructions keeps its cache)."""
        session = place.session
        if json.loads(session.client_instructions) == list(instructions):
            return
        prompt = self._session_prompt(session, instructions)
        values = {"client_instructions": json.dumps(list(instructions)), "system_prompt": prompt}
        self.store.set_client_context(
            session_id=session.id,
            lease=place.lease,
            values=values,
            cache_break=INSTRUCTIONS_CHANGED,
        )
        session.client_instructions, session.system_prompt = values.values()
        log.info("session %s: client instructions changed; prompt rebuilt", session.id)

    def _session_prompt(self, session: SessionRow, instructions: Sequence[str]) -> str:
        """The session's system prompt rebuilt from its stored inputs and tool snapshot."""
        return self.setup.prompt(
            self.profiles.by_name[session.profile],
            session_id=session.id,
            owner=session.owner,
            end_user=session.end_user,
            started_at=session.started_at,
            instructions=instructions,
            snapshot=session.tool_snapshot,
        )

    def _indexer(self, place: Placement, seed: str) -> OnFinish:
        """After the turn: chain the answer the client received onto the index."""
        session_id = place.session.id

        def index(handle: TurnHandle, finished: TurnFinished) -> tuple[str, int] | None:
            if finished.error is not None or finished.exit_reason == "cancelled":
                return None
            head = extend(place.head or seed, visible_answer(handle))
            position = place.position + 1
            # The head moves in the lease's release, the closing's next statement.
            index_transcript(
                self.store,
                session_id=session_id,
                keys=[TranscriptKey(head, position, None)],
                head=head,
                length=position,
                move_head=False,
            )
            return head, position

        return index

    # ------------------------------------------------------------------ the turn

    def _tool_specs(self, req: TurnRequest, place: Placement) -> tuple[ToolSpec, ...]:
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
                toolsets=session_toolsets(self.tools, req.profile, session.owner),
                why=f"tools no longer registered: {', '.join(missing)}",
            )
            session.tool_snapshot = snapshot
        if extra := self.tools.extra_toolsets(req.profile.name, session.owner):
            snapshot = self._follow_mcp_servers(req, place, extra)
        client = declared_specs(req)
        serialised = serialise_specs(client)
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

    def _follow_mcp_servers(
        self, req: TurnRequest, place: Placement, toolsets: tuple[str, ...]
    ) -> str:
        """The session's snapshot with its MCP tools as its servers list them now.

        A server's listing changes (list_changed, a server that arrived late) reach a
        session here, at its next opening, as one named cache break; a turn already
        running keeps the tools it started with."""
        session = place.session
        want = snapshot_tools(self.tools, toolsets)
        have = mcp_portion(session.tool_snapshot)
        if want == have:
            return session.tool_snapshot
        before = session.tool_snapshot
        snapshot = with_mcp_portion(before, want)
        self.store.set_tool_snapshot(
            session_id=session.id, lease=place.lease, snapshot=snapshot, reason=MCP_TOOLS_CHANGED
        )
        session.tool_snapshot = snapshot
        log.info("session %s: its MCP servers' tools changed (a cache break)", session.id)
        if (have == EMPTY) != (want == EMPTY):
            # The stable tier says whether the session has MCP tools: rebuilt with them, or
            # the stored prompt would no longer prove where its stable tier ends.
            prompt = self._session_prompt(session, json.loads(session.client_instructions))
            self.store.set_client_context(
                session_id=session.id,
                lease=place.lease,
                values={"system_prompt": prompt},
                cache_break=MCP_TOOLS_CHANGED,
            )
            session.system_prompt = prompt
        return snapshot

    def _context(
        self,
        req: TurnRequest,
        place: Placement,
        owner: str,
        spend: SpendGuard,
        *,
        turn_id: str,
        emit: Callable[[TurnEvent], None],
    ) -> TurnContext:
        session = place.session
        profile = req.profile
        specs = self._tool_specs(req, place)
        check_tool_choice(req.tool_choice, specs)
        allowed = snapshot_names(session.tool_snapshot)
        tools = self.tools.restricted_to(allowed)
        if req.remote.tools:
            tools = tools.with_tools(req.remote.tools)
        return TurnContext(
            store=self.store,
            provider=self.profiles.provider(profile),
            # The snapshot is the allowlist: a hidden tool is an unknown tool to this turn.
            tools=tools,
            profile=profile,
            session_id=session.id,
            owner=owner,
            end_user=session.end_user,
            bound_session=req.bound_session,
            lease=place.lease,
            turn_id=turn_id,
            # A new session's prompt build has just made (or left) its workspace.
            workspace=(self.setup.workspace_path if place.created else self.setup.workspace)(
                profile, session.id
            ),
            sampling=req.sampling,
            emit=emit,
            spend=spend,
            price_override=price_override(profile),
            metrics=self.metrics,
            tool_specs=specs,
            stable_tier=stable_tier(profile, allowed),
            prefixes=self.prefixes,
            compressor=self.compressor,
            gate=self.approvals,
            rebuild_prompt=partial(
                self.setup.prompt,
                profile,
                session_id=session.id,
                owner=session.owner,
                end_user=session.end_user,
                started_at=session.started_at,
                instructions=tuple(json.loads(session.client_instructions)),
                snapshot=session.tool_snapshot,
            ),
            client_tools=frozenset(s.name for s in req.client_tools),
            tool_choice=req.tool_choice,
            parallel_tool_calls=req.parallel_tool_calls,
            output_format=req.output_format,
            fallbacks=self.profiles.fallback_routes(profile),
            remote=req.remote,
            approved=place.approved,
        )


def _calls_of(message: IncomingMessage) -> list[dict[str, str]]:
    row = message.row
    return list(row.tool_calls or []) if row is not None else []


def declared_specs(req: TurnRequest) -> tuple[ToolSpec, ...]:
    """The tools the request itself declares: its remote MCP servers' (sorted) and the
    client's. Both are the request's to change, and a change is one named break."""
    if not req.remote.tools:
        return req.client_tools
    remote = sorted((t.spec() for t in req.remote.tools), key=lambda s: s.name)
    return (*remote, *req.client_tools)


def visible_row(row: NewMessage) -> VisibleMessage | None:
    if row.role == "user":
        return VisibleMessage("user", row.content or "", images=row.images)
    if row.role == "assistant":
        calls = tuple((c["id"], c["name"], c.get("arguments", "")) for c in row.tool_calls or [])
        return VisibleMessage("assistant", row.content or "", calls=calls)
    if row.role == "tool":
        return VisibleMessage("tool", row.content or "", call_id=row.tool_call_id or "")
    return None


def visible_answer(handle: TurnHandle) -> VisibleMessage:
    """The assistant message exactly as the client received it."""
    text: list[str] = []
    calls: tuple[tuple[str, str, str], ...] = ()
    for event in handle.history():
        if isinstance(event, TurnText):
            text.append(event.text)
        elif isinstance(event, ClientToolCalls):
            calls = tuple((c.id, c.name, c.arguments) for c in event.calls)
    return VisibleMessage("assistant", "".join(text), calls=calls)


__all__ = ["OpenedTurn", "Placement", "Profile", "SessionLifecycle", "new_session_id"]
