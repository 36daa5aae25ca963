"""The sessions surface's actions: fork, retract, purge. Routes check ownership and map the
exceptions here to statuses; nothing here knows about HTTP.

Retract and purge take the session's turn lease first, like any writer: without it a turn
running on the session would keep appending live rows after the session was retracted.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass

from app.agent.context.context_files import workspace_key
from app.agent.opening.lifecycle import new_session_id
from app.agent.opening.profiles import Profiles
from app.agent.opening.session_setup import SessionSetup
from app.agent.refusals import ProfileGone, SessionBusy
from app.agent.turns.manager import TurnManager
from app.db import session_query as q
from app.db.chat_store import put_images, session_images
from app.db.context_store import copy_context_rows
from app.db.models import MessageRow, SessionRow
from app.db.store import NewMessage, Store


class ForkPointMissing(Exception):
    """The message to fork from is not a live message of the session."""


@dataclass(frozen=True, slots=True)
class Forked:
    session_id: str
    messages: int
    workspace_copied: bool


def _copy(row: MessageRow) -> NewMessage:
    return NewMessage(
        role=row.role,
        content=row.content,
        api_content=row.api_content,
        tool_calls=json.loads(row.tool_calls) if row.tool_calls else None,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        is_error=row.is_error,
        reasoning=row.reasoning,
        kind=row.kind,
        images=tuple(json.loads(row.images)) if row.images else (),
    )


class SessionService:
    def __init__(
        self, *, store: Store, profiles: Profiles, setup: SessionSetup, turns: TurnManager
    ) -> None:
        self.store = store
        self.profiles = profiles
        self.setup = setup
        self.turns = turns

    def private_workspace(self, session: SessionRow) -> bool:
        profile = self.profiles.get(session.profile)
        return profile is not None and profile.workspace is None

    def fork(self, source: SessionRow, *, message_id: int | None) -> Forked:
        """A new session holding the source's live rows up to `message_id` (all if None),
        with its own copy of the source's private workspace.

        An assistant tool call cut off from its results is closed by the next turn's
        interrupted-call repair, so any live message is a valid fork point.
        """
        profile = self.profiles.get(source.profile)
        if profile is None:
            raise ProfileGone(source.profile)
        upto = (
            message_id
            if message_id is not None
            else q.max_message_id(self.store, session_id=source.id)
        )
        rows = q.live_messages_through(self.store, session_id=source.id, message_id=upto)
        if message_id is not None and not any(r.id == message_id for r in rows):
            raise ForkPointMissing(str(message_id))
        new_id = new_session_id()
        copied = False
        if profile.workspace is None:
            src = self.setup.private_workspace(source.id)
            if src.is_dir():
                dst = self.setup.private_workspace(new_id)
                # symlinks=True: following a link the agent planted would copy files from
                # outside the workspace into the fork.
                shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
                # Before the fork's prompt is built: a copied file a tool changed stays held.
                copy_context_rows(self.store, source=workspace_key(src), target=workspace_key(dst))
                copied = True
        instructions = json.loads(source.client_instructions)
        prompt = self.setup.prompt(
            profile,
            session_id=new_id,
            owner=source.owner,
            end_user=source.end_user,
            started_at=time.time(),
            instructions=instructions,
            snapshot=source.tool_snapshot,
        )
        self.store.create_session(
            session_id=new_id,
            owner=source.owner,
            end_user=source.end_user,
            profile=profile.name,
            system_prompt=prompt,
            tool_snapshot=source.tool_snapshot,
            client_instructions=instructions,
            messages=[_copy(r) for r in rows],
        )
        # The copied rows name their images by hash; the fork needs the images themselves.
        images = session_images(self.store, session_id=source.id)
        put_images(self.store, session_id=new_id, images=list(images.values()))
        return Forked(session_id=new_id, messages=len(rows), workspace_copied=copied)

    def retract(self, session: SessionRow, *, purge: bool) -> None:
        """Raises `SessionBusy` while a turn runs on the session."""
        lease = self.turns.new_lease(session.id)
        try:
            if purge:
                q.purge_session(self.store, session_id=session.id)
                if self.private_workspace(session):
                    path = self.setup.private_workspace(session.id)
                    shutil.rmtree(path, ignore_errors=True)
            else:
                q.retract_session(self.store, session_id=session.id)
        finally:
            self.store.release_lease(session_id=session.id, lease=lease)


__all__ = ["ForkPointMissing", "Forked", "ProfileGone", "SessionBusy", "SessionService"]
