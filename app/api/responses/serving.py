"""The Responses API serving object: a Responses request in, a running turn out (started as
a chat turn is, `app/api/turn_serving.py`), and the stored Response object once it ends.

`previous_response_id` is a session continuation by another name: the response row maps
to its session. Continuing from an older response than the session's newest would
interleave two branches in one linear log, so it forks the session at that response
first. Recording happens in a task owned by the server, not the request, so a client that
disconnects mid-stream still leaves a retrievable (cancelled) response behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from dataclasses import dataclass
from decimal import Decimal
from functools import partial

from app.agent.events import TurnFinished
from app.agent.turn_request import TurnRequest
from app.agent.turns.handle import Placed, TurnHandle
from app.agent.turns.manager import IDEMPOTENCY_TTL_S, RETRY_WINDOW_S, SessionBusy
from app.api.chat.render import usage_out
from app.api.http.errors import ApiError
from app.api.http.owned import visible_response
from app.api.responses.background import BackgroundRuns
from app.api.responses.background import Recording as BackgroundRecording
from app.api.responses.remote_mcp import RemoteMcp
from app.api.responses.render import (
    Recording,
    ResponseShell,
    output_of,
    response_error,
    response_usage,
    status_of,
)
from app.api.responses.translate import translate
from app.api.responses.wire import ResponseCreateRequest, new_id
from app.api.retries import Retry
from app.api.sessions.service import SessionService
from app.api.turn_serving import Asked, TurnServing
from app.db import session_query as q
from app.db.session_models import ResponseRow
from app.providers.pricing import Cost
from app.providers.usage import Usage
from app.security.principal import Principal

log = logging.getLogger(__name__)

SETTLE_S = 10.0
"""At shutdown, how long the ended turns' final records may take to land."""
RUN_GRACE_S = max(IDEMPOTENCY_TTL_S, RETRY_WINDOW_S)
"""As long as the chat path may still reattach a retry to a finished turn."""


@dataclass
class ResponseRun:
    shell: ResponseShell
    handle: TurnHandle
    done: Recording
    """The final Response body and how the turn ended, once recorded."""
    background: BackgroundRecording | None = None
    """A background response's live recording (its events, from sequence number 0)."""


class ResponsesServing:
    def __init__(
        self,
        *,
        turn_serving: TurnServing,
        sessions: SessionService,
        background: BackgroundRuns | None = None,
        remote_mcp: RemoteMcp | None = None,
    ) -> None:
        self.turn_serving = turn_serving
        self.sessions = sessions
        self.remote_mcp = remote_mcp or RemoteMcp()
        self.store = turn_serving.store
        self.background = background
        """The running background responses; None when `COURIER_BACKGROUND` is off."""
        self._runs: dict[str, ResponseRun] = {}
        """Running responses by turn id: a retried request reattaches to its twin's turn
        and must get the same response, not a second record of one turn."""

    async def start(
        self,
        request: ResponseCreateRequest,
        asked: Asked,
        *,
        retry: Retry,
        hard_cap: Decimal | None = None,
    ) -> ResponseRun:
        translated = translate(request)  # every 400 before a session is forked
        background = self._background_runs(request)
        await self.remote_mcp.check_urls(translated)
        if ignored := request.ignored_fields():
            log.info("responses: ignoring unsupported request fields: %s", ", ".join(ignored))
        session_id = self._continued_session(request, asked)
        remote, listings = await self.remote_mcp.prepare(translated, self.store, request)
        # Every shell of this response repeats its listings (remote mcp tools).
        new_shell = partial(ResponseShell, model=request.model, request=request, listings=listings)
        first = q.max_message_id(self.store, session_id=session_id) + 1 if session_id else 0
        opened: list[BackgroundRecording] = []

        def open_background(handle: TurnHandle, session_id: str) -> None:
            """In the turn's opening unit: the client hears the id only once it is stored."""
            assert background is not None
            shell = new_shell(id=new_id("resp"), session_id=session_id)
            recording = BackgroundRecording(shell, handle, owner=asked.principal.owner)
            row = self._row(
                shell, asked.principal, items=translated.items, first=first, turn=handle.turn_id
            )
            background.open(row, recording)
            opened.append(recording)

        started = await self.turn_serving.start(
            asked,
            retry,
            model=request.model,
            translate=lambda profile: _capped(
                translated.turn_request(
                    asked, session_id=session_id, profile=profile, remote=remote
                ),
                hard_cap,
            ),
            on_open=open_background if background is not None else None,
        )
        if (seen := self._runs.get(started.handle.turn_id)) is not None:
            return seen
        recording = opened[0] if opened else None
        if background is not None and recording is None:
            # A retry reattached to a turn whose run this process no longer holds.
            raise ApiError(
                409,
                "this request repeats a background response that has already ended",
                code="background_replayed",
            )
        shell = (
            recording.shell
            if recording is not None
            else new_shell(id=new_id("resp"), session_id=started.session_id)
        )
        if background is not None and recording is not None:
            background.attach(recording)
        done = asyncio.create_task(
            self._record(
                shell,
                started.handle,
                items=translated.items,
                first=first,
                principal=asked.principal,
                recording=recording,
            )
        )
        run = ResponseRun(shell=shell, handle=started.handle, done=done, background=recording)
        turn_id = started.handle.turn_id
        self._runs[turn_id] = run
        # Kept a little past the end, so a retry arriving just after still finds it.
        done.add_done_callback(
            lambda _t: asyncio.get_running_loop().call_later(
                RUN_GRACE_S, self._runs.pop, turn_id, None
            )
        )
        return run

    def _background_runs(self, request: ResponseCreateRequest) -> BackgroundRuns | None:
        if not request.background:
            return None
        if self.background is None:
            raise ApiError(
                400,
                "background responses are turned off on this server (COURIER_BACKGROUND)",
                param="background",
                code="unsupported_parameter",
            )
        return self.background

    async def aclose(self, timeout_s: float = SETTLE_S) -> None:
        """At shutdown, after the turns ended: let their final records land before the
        store closes (a background response would otherwise be repaired as `failed`
        by the next start), then stop the background flusher."""
        pending = [run.done for run in self._runs.values() if not run.done.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        if self.background is not None:
            await self.background.aclose()

    @staticmethod
    def _row(
        shell: ResponseShell,
        principal: Principal,
        *,
        items: list[dict[str, object]],
        first: int,
        body: dict[str, object] | None = None,
        last: int | None = None,
        turn: str | None = None,
    ) -> ResponseRow:
        """The stored row: the final one, or (with `turn`) a background response's first,
        `queued` with no body but its shell yet."""
        r = shell.request
        return ResponseRow(
            id=shell.id,
            session_id=shell.session_id,
            owner=principal.owner,
            previous_response_id=r.previous_response_id,
            first_message_id=first,
            last_message_id=first if last is None else last,
            body=json.dumps(body if body is not None else shell.body(status="queued", output=[])),
            input_items=json.dumps(items),
            background=bool(r.background),
            status="queued" if turn is not None else "",
            turn_id=turn,
        )

    def _continued_session(self, request: ResponseCreateRequest, asked: Asked) -> str | None:
        principal = asked.principal
        if request.previous_response_id is None:
            if principal.session_id is not None:
                raise _token_session_mismatch()  # it would start a session
            return None
        # Another end user's answer is missing for this one (and never forked for it).
        previous = visible_response(
            self.store,
            principal,
            request.previous_response_id,
            param="previous_response_id",
            end_user=asked.on_behalf.end_user,
        )
        latest = q.latest_response(self.store, session_id=previous.session_id)
        if latest is None or latest.id == previous.id:
            return previous.session_id
        if principal.session_id is not None:
            # Refused before the fork is made: the fork would be a session it may not use.
            raise _token_session_mismatch()
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
        recording: BackgroundRecording | None = None,
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
        status = status_of(finished)
        output = output_of(shell, handle.history(), status)
        courier = usage_out(finished).courier.model_dump(mode="json")
        final = shell.body(
            status=status,
            output=output,
            usage=response_usage(finished, courier),
            error=response_error(finished),
            finished=finished,
        )
        last = q.max_message_id(self.store, session_id=shell.session_id)
        if recording is not None and self.background is not None:
            await self.background.finish(recording, final, last_message_id=last)
        elif shell.request.store:
            q.save_response(
                self.store,
                self._row(shell, principal, items=items, first=first, body=final, last=last),
            )
        else:
            self._forget(shell.session_id, handle.placed, first=first, last=last)
        return final, finished

    def _forget(self, session_id: str, placed: Placed | None, *, first: int, last: int) -> None:
        """`store: false`: keep nothing of this exchange beyond the usage ledger.

        Continuity may place a request without `previous_response_id` on a stored session:
        judging "whole" by that id alone purged the conversation the client had kept."""
        whole = first == 0  # a relay has no opening: its ledger session is its own
        if placed is not None:
            whole = placed.created
            if placed.first_id is not None:
                first = placed.first_id
            elif first == 0:
                # Nothing appended on a session it did not make: delete nothing rather
                # than from row 0 (continuity never places a request that brings nothing).
                first = last + 1
        try:
            lease = self.turn_serving.turns.new_lease(session_id)
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
        lease = self.turn_serving.turns.new_lease(row.session_id)
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


def _capped(req: TurnRequest, hard_cap: Decimal | None) -> TurnRequest:
    """`start`'s `hard_cap`: the request's spend cap, never passed by an upstream call (a
    job run's `max_cost_usd`, app/api/jobs/runner.py); a client's own cap stays soft."""
    if hard_cap is None:
        return req
    return dataclasses.replace(req, max_cost_usd=hard_cap, hard_cap=True)


def _token_session_mismatch() -> ApiError:
    """The caller's token is bound to a session this response would not continue."""
    return ApiError(
        403,
        "this token is bound to one session; continue it with previous_response_id",
        code="token_session_mismatch",
    )
