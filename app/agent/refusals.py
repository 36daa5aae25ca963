"""Why the agent will not start a turn, named in the agent's own terms.

Each refusal is raised before anything is written and carries what a client needs to fix
the request (the offending field, the session); `app/api/http/statuses.py` maps it to an
HTTP status and the OpenAI error shape. The agent never picks a status itself, so a second
front door (the Responses API, a CLI) reuses the same refusals with its own wording.
"""

from __future__ import annotations

from app.agent.events import TurnError


class Refused(Exception):
    """A request the agent refuses; `code` is the stable name clients branch on."""

    code = "refused"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class UnknownModel(Refused):
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"the model '{model}' does not exist", param="model")


class SessionNotFound(Refused):
    code = "session_not_found"

    def __init__(self, session_id: str, *, param: str = "session_id") -> None:
        super().__init__(f"session '{session_id}' not found", param=param)


class ProfileGone(Refused):
    code = "profile_gone"

    def __init__(self, profile: str = "") -> None:
        super().__init__("the session's profile is no longer configured")
        self.profile = profile


class SessionBusy(Refused):
    """Another turn holds the session's lease."""

    code = "session_busy"

    def __init__(self, session_id: str) -> None:
        super().__init__("a turn is already running on this session")
        self.session_id = session_id


class UnknownToolCall(Refused):
    code = "unknown_tool_call"

    def __init__(self, call_id: str | None, *, param: str) -> None:
        super().__init__(
            f"tool result for '{call_id}', which is not an open tool call of this conversation",
            param=param,
        )


class RemoteServerUndeclared(Refused):
    code = "mcp_server_not_declared"

    def __init__(self, name: str, *, param: str) -> None:
        super().__init__(
            f"the approved call is to '{name}', whose mcp server this request does not "
            "declare in its tools; declare it again (tools are not inherited)",
            param=param,
        )


class UnknownToolChoice(Refused):
    code = "invalid_tool_choice"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"tool_choice names '{name}', which is not a declared tool", param="tool_choice"
        )


class PrefillUnsupported(Refused):
    code = "prefill_unsupported"

    def __init__(self, *, param: str) -> None:
        super().__init__(
            "a trailing assistant message asks to continue (prefill) that answer, which this "
            "profile's upstream does not support; end the conversation with a user message",
            param=param,
        )


class IdempotencyKeyReused(Refused):
    code = "idempotency_key_reused"

    def __init__(self) -> None:
        super().__init__(
            "this Idempotency-Key was used for a different request", param="Idempotency-Key"
        )


class TurnCancelled(Refused):
    """The keyed turn was cancelled: replaying it would answer an empty success."""

    code = "turn_cancelled"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message
            or "the turn started with this Idempotency-Key was cancelled before it finished; "
            "send the request with a new key to run it again",
            param="Idempotency-Key",
        )


class SpendRefused(Refused):
    """A spend cap is already reached (or cannot be tracked) before the turn starts."""

    def __init__(self, error: TurnError) -> None:
        super().__init__(error.message)
        self.code = error.code
        self.error = error


class ResumeStale(Exception):
    """A resent history's `ResumePoint` no longer holds under the session's lease (another
    turn appended, a retraction, a compaction, the session gone): the request is taken
    again by the full path. Never shown to a client, so not a `Refused`."""
