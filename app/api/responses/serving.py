"""The Responses API serving object: a Responses request in, a running turn on the chat
serving path out, and the stored Response object once the turn ends.

`previous_response_id` is a session continuation by another name: the response row maps
to its session. Continuing from an older response than the session's newest would
interleave two branches in one linear log, so it forks the session at that response
first. Recording happens in a task owned by the server, not the request, so a client that
disconnects mid-stream still leaves a retrievable (cancelled) response behind.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from pydantic import ValidationError

from app.agent.events import ClientToolCalls, TurnFinished, TurnText
from app.agent.turns.handle import TurnHandle
from app.agent.turns.manager import IDEMPOTENCY_TTL_S, RETRY_WINDOW_S, SessionBusy
from app.api.chat.render import usage_out
from app.api.chat.serving import ChatServing, Retry
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError, validation_error
from app.api.responses.wire import (
    ResponseCreateRequest,
    ResponseShell,
    chat_body,
    check_supported,
    input_messages,
    new_id,
    output_items,
    response_error,
    response_usage,
    status_of,
)
from app.api.sessions.service import SessionService
from app.db import session_query as q
from app.db.session_models import ResponseRow
from app.providers.base import ToolCall
from app.providers.pricing import Cost
from app.providers.usage import Usage
from app.security.principal import Principal

log = logging.getLogger(__name__)

RUN_GRACE_S = max(IDEMPOTENCY_TTL_S, RETRY_WINDOW_S)
"""As long as the chat path may still reattach a retry to a finished turn."""


@dataclass
class ResponseRun:
    shell: ResponseShell
    handle: TurnHandle
    done: asyncio.Task[tuple[dict[str, object], TurnFinished]]
    """The final Response body and how the turn ended."""


class TokenSessionMismatch(Exception):
    """The caller's token is bound to a session this response would not continue."""


class ResponseNotFound(Exception):
    """No such response for this caller (another key's answers the same: no oracle)."""

    def __init__(self, response_id: str, param: str | None = None) -> None:
        super().__init__(response_id)
        self.response_id = response_id
        self.param = param


class ResponsesServing:
    def __init__(self, *, chat: ChatServing, sessions: SessionService) -> None:
        self.chat = chat
        self.sessions = sessions
        self.store = chat.store
        self._runs: dict[str, ResponseRun] = {}
        """Running responses by turn id: a retried request reattaches to its twin's turn
        and must get the same response, not a second record of one turn."""

    def owned(
        self,
        principal: Principal,
        response_id: str,
        param: str | None = None,
        *,
        end_user: str | None = None,
    ) -> ResponseRow:
        row = q.get_response(self.store, response_id=response_id)
        # Another key's response, another session's for a bound token, or another end
        # user's for a request that names one, answers exactly like a missing one.
        if (
            row is None
            or row.retracted
            or not principal.may_see(session_id=row.session_id, owner=row.owner)
        ):
            raise ResponseNotFound(response_id, param)
        if end_user is not None:
            session = self.store.get_session(session_id=row.session_id)
            if session is None or session.end_user != end_user:
                raise ResponseNotFound(response_id, param)
        return row

    async def start(
        self,
        request: ResponseCreateRequest,
        principal: Principal,
        *,
        retry: Retry,
        on_behalf: OnBehalf,
    ) -> ResponseRun:
        check_supported(request)
        if ignored := request.ignored_fields():
            log.info("responses: ignoring unsupported request fields: %s", ", ".join(ignored))
        translated = input_messages(request)
        session_id = self._continued_session(request, principal, on_behalf.end_user)
        first = q.max_message_id(self.store, session_id=session_id) + 1 if session_id else 0
        try:
            chat = ChatCompletionRequest.model_validate(chat_body(request, translated.messages))
        except ValidationError as exc:
            raise validation_error(exc) from None
        try:
            started = await self.chat.start(
                chat, principal, session_id, retry=retry, on_behalf=on_behalf
            )
        except ApiError as exc:
            # The chat path names its own fields; a Responses client sent `input`.
            if exc.param and exc.param.startswith("messages"):
                exc.param = "input"
            elif exc.param == "session_id":
                exc.param = "previous_response_id"
            raise
        if (seen := self._runs.get(started.handle.turn_id)) is not None:
            return seen
        shell = ResponseShell(
            id=new_id("resp"),
            model=request.model,
            request=request,
            session_id=started.session_id,
        )
        done = asyncio.create_task(
            self._record(
                shell, started.handle, items=translated.items, first=first, principal=principal
            )
        )
        run = ResponseRun(shell=shell, handle=started.handle, done=done)
        turn_id = started.handle.turn_id
        self._runs[turn_id] = run
        # Kept a little past the end, so a retry arriving just after still finds it.
        done.add_done_callback(
            lambda _t: asyncio.get_running_loop().call_later(
                RUN_GRACE_S, self._runs.pop, turn_id, None
            )
        )
        return run

    def _continued_session(
        self, request: ResponseCreateRequest, principal: Principal, end_user: str | None
    ) -> str | None:
        if request.previous_response_id is None:
            if principal.session_id is not None:
                raise TokenSessionMismatch(principal.session_id)  # it would start a session
            return None
        # Another end user's answer is missing for this one (and never forked for it).
        previous = self.owned(
            principal, request.previous_response_id, "previous_response_id", end_user=end_user
        )
        latest = q.latest_response(self.store, session_id=previous.session_id)
        if latest is None or latest.id == previous.id:
            return previous.session_id
        if principal.session_id is not None:
            # Refused before the fork is made: the fork would be a session it may not use.
            raise TokenSessionMismatch(principal.session_id)
        source = self.store.get_session(session_id=previous.session_id)
        assert source is not None
        forked = self.sessions.fork(source, message_id=previous.last_message_id)
        log.info(
            "responses: %s continues an older response; forked %s -> %s",
            request.previous_response_id,
            previous.session_id,
            forked.session_id,
        )
        return forked.session_id

    async def _record(
        self,
        shell: ResponseShell,
        handle: TurnHandle,
        *,
        items: list[dict[str, object]],
        first: int,
        principal: Principal,
    ) -> tuple[dict[str, object], TurnFinished]:
        # Wait on the task, not on a subscription: a subscriber counts as a client still
        # watching, and would keep a turn whose client hung up from being cancelled.
        assert handle.task is not None
        await asyncio.wait({handle.task})
        finished = handle.outcome or TurnFinished(
            exit_reason="cancelled",
            finish_reason="stop",
            usage=Usage(),
            cost=Cost.zero(),
            upstream_calls=0,
        )
        text: list[str] = []
        calls: tuple[ToolCall, ...] = ()
        for event in handle.history():
            if isinstance(event, TurnText):
                text.append(event.text)
            elif isinstance(event, ClientToolCalls):
                calls = event.calls
        status = status_of(finished)
        output = output_items(shell.message_id, "".join(text), calls, status)
        courier = usage_out(finished).courier.model_dump(mode="json")
        final = shell.body(
            status=status,
            output=output,
            usage=response_usage(finished, courier),
            error=response_error(finished),
            finished=finished,
        )
        last = q.max_message_id(self.store, session_id=shell.session_id)
        if shell.request.store:
            q.save_response(
                self.store,
                ResponseRow(
                    id=shell.id,
                    session_id=shell.session_id,
                    owner=principal.owner,
                    previous_response_id=shell.request.previous_response_id,
                    first_message_id=first,
                    last_message_id=last,
                    body=json.dumps(final),
                    input_items=json.dumps(items),
                ),
            )
        else:
            self._forget(shell.session_id, first=first, last=last, whole=first == 0)
        return final, finished

    def _forget(self, session_id: str, *, first: int, last: int, whole: bool) -> None:
        """`store: false`: keep nothing of this exchange beyond the usage ledger."""
        try:
            lease = self.chat.turns.new_lease(session_id)
        except SessionBusy:
            log.warning("responses: session %s busy; store=false rows kept", session_id)
            return
        try:
            if whole:
                q.purge_session(self.store, session_id=session_id)
            else:
                q.delete_messages(
                    self.store, session_id=session_id, lease=lease, first_id=first, last_id=last
                )
        finally:
            self.store.release_lease(session_id=session_id, lease=lease)

    def retract(self, row: ResponseRow) -> None:
        """Take the response's rows out of the session's live view; nothing is deleted.
        Raises `SessionBusy` while a turn runs on the session."""
        lease = self.chat.turns.new_lease(row.session_id)
        try:
            q.retract_messages(
                self.store,
                session_id=row.session_id,
                lease=lease,
                first_id=row.first_message_id,
                last_id=row.last_message_id,
            )
            q.mark_response_retracted(self.store, response_id=row.id)
        finally:
            self.store.release_lease(session_id=row.session_id, lease=lease)
