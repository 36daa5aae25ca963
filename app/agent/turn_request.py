"""What the agent is asked to do, in its own terms: no wire models, no HTTP.

The HTTP face translates a client's request into a `TurnRequest` once, from either front
door (`app/api/chat/translate.py`, `app/api/responses/translate.py`); from there session
placement, the relay and the turn read only these frozen values, so the Responses API and
the chat path cannot disagree about what a message means.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from app.agent.refusals import PrefillUnsupported, UnknownToolChoice
from app.config import Profile
from app.db.chat_store import StoredImage
from app.db.store import NewMessage
from app.providers.base import OutputFormat, Provider, SamplingParams, ToolChoice, ToolSpec
from app.tools.mcp.remote import NO_REMOTE_TOOLS, RemoteTools

Role = Literal["user", "assistant", "tool", "system", "developer", "function"]


@dataclass(frozen=True, slots=True)
class VisibleMessage:
    """A client-visible message, as stateless continuity hashes it
    (`app/agent/opening/continuity.py`)."""

    role: Literal["user", "assistant", "tool"]
    text: str
    calls: tuple[tuple[str, str, str], ...] = ()
    """(id, name, arguments) of client tool calls on an assistant message."""
    call_id: str = ""
    images: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """One client message after the leading instructions, translated once."""

    role: Role
    make_row: Callable[[], NewMessage | None]
    visible: VisibleMessage | None
    """What the continuity chain matches on (None for an instruction)."""
    images: tuple[StoredImage, ...]
    param: str
    """Where it sits in the client's request (`messages[3]`), for errors that name it."""
    call_param: str = ""
    """A tool result's: where the call id it answers sits (`messages[3].tool_call_id`),
    for the error that refuses a result no open call asked for."""

    @property
    def row(self) -> NewMessage | None:
        """The log row it becomes (None: an assistant message with neither text nor calls),
        made when asked: a client resends its whole history, and only the messages past
        the stored conversation become rows (building them all cost 2 µs a message)."""
        return self.make_row()

    @property
    def has_calls(self) -> bool:
        row = self.row  # built on each read
        return bool(row is not None and row.tool_calls)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """A resent history's stored prefix, matched before the request was translated
    (`app/api/chat/resend.py`): `messages` follow that session's visible transcript at
    `position`. The lifecycle takes it only if the session still stands there under its
    lease (`ResumeStale` otherwise)."""

    session_id: str
    position: int
    head: str
    """The transcript hash at `position`."""
    last_row_id: int
    compactions: int


@dataclass(frozen=True, slots=True)
class TurnRequest:
    owner: str
    admin: bool
    session_id: str | None
    """The session the client named (header or body), if any."""
    profile: Profile
    instructions: tuple[str, ...]
    """Leading system/developer texts: the context tier of the session's prompt."""
    messages: tuple[IncomingMessage, ...]
    client_tools: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    """`auto`, `none`, `required` or one tool's name (checked against the turn's tools)."""
    sampling: SamplingParams
    output_format: OutputFormat | None = None
    parallel_tool_calls: bool | None = None
    end_user: str | None = None
    """The app's end user (app/api/http/end_users.py): a new session is made for it, and
    continuity, memory, search and spend are scoped by it under the key."""
    bound_session: str | None = None
    """The session the caller's token is bound to (None for a key or an unbound token):
    the turn's tools reach that session's transcript alone (`session_search`), as the
    token's routes do."""
    chat_name: str | None = None
    """The app's own id for the conversation (a session header): names the session."""
    max_cost_usd: Decimal | None = None
    """The request's own spend cap."""
    hard_cap: bool = False
    """`max_cost_usd` is hard: no upstream call is sent that could pass it (a job run's)."""
    session_param: str = "session_id"
    """Where the client named the session, for the 404 that refuses it
    (`previous_response_id` on the Responses API)."""
    remote: RemoteTools = NO_REMOTE_TOOLS
    """The Responses request's own MCP servers' tools, for this turn only, and the held
    calls the client approved."""
    resume: ResumePoint | None = None
    """Set when the request carries only what follows a stored prefix (a resent history
    recognised before translation): where it continues."""

    def rows(self, start: int = 0) -> list[NewMessage]:
        return [row for m in self.messages[start:] if (row := m.row) is not None]

    def images(self, start: int = 0) -> list[StoredImage]:
        return [image for m in self.messages[start:] for image in m.images]


def new_tail(messages: tuple[IncomingMessage, ...]) -> int:
    """Where the new part of a request for a known session starts: the trailing run of
    user, instruction and tool messages (plus a final assistant prefill). With a session
    id the server's log is the truth, so older messages are not appended again."""
    end = len(messages)
    if end and messages[-1].role == "assistant":
        end -= 1
    start = end
    while start > 0 and messages[start - 1].role != "assistant":
        start -= 1
    return start


def check_tool_choice(choice: ToolChoice, specs: tuple[ToolSpec, ...]) -> None:
    """A named tool_choice must name one of the turn's tools."""
    if choice not in ("auto", "none", "required") and choice not in {s.name for s in specs}:
        raise UnknownToolChoice(choice)


def refuse_prefill(req: TurnRequest, provider: Provider) -> None:
    """A trailing assistant message asks to continue it: only where the upstream can."""
    last = req.messages[-1] if req.messages else None
    if last is None or last.role != "assistant" or last.has_calls:
        return
    profile = req.profile
    if profile.prefill if profile.prefill is not None else provider.prefill:
        return
    raise PrefillUnsupported(param=last.param)
