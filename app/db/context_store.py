"""SQL for held context files: what a person accepted, what a tool left, and the decision.

The policy (when content is held, which content a prompt takes) lives in
`app/agent/context/context_files.py`; here are its reads and writes. A change and the approval that
asks about it are written in the caller's unit; a decision and its effect in one
transaction, so an accepted change can never be left pending or half applied.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, update
from sqlmodel import Session, col, select

from app.db.approval_models import INSTRUCTION_CHANGE_RULE, ApprovalRow, ContextFileRow
from app.db.store import Store


@dataclass(frozen=True, slots=True)
class FileChange:
    """One context file before and after a tool batch."""

    name: str
    before_digest: str
    before_text: str | None
    after_digest: str
    after_text: str | None


@dataclass(frozen=True, slots=True)
class Asking:
    """Who changed the files, and how the approval that asks about them reads."""

    session_id: str
    turn_id: str
    requested_by: str
    expires_at: float
    summary: str
    reason: str


def context_rows(store: Store, *, workspace: str) -> dict[str, ContextFileRow]:
    with store.session() as db:
        rows = db.exec(select(ContextFileRow).where(ContextFileRow.workspace == workspace)).all()
        return {row.name: row for row in rows}


def record_change(
    store: Store, *, workspace: str, change: FileChange, asking: Asking
) -> str | None:
    """Hold what a tool left in a context file; returns the new approval's id, or None when
    the file is back to its accepted content."""
    now = time.time()
    with store.session() as db:
        row = db.get(ContextFileRow, (workspace, change.name))
        if row is None:
            row = ContextFileRow(
                workspace=workspace,
                name=change.name,
                approved_digest=change.before_digest,
                approved_text=change.before_text,
            )
        elif row.held_digest is None or change.before_digest != row.held_digest:
            # Not what a tool left: the content before this batch is the person's own.
            row.approved_digest, row.approved_text = change.before_digest, change.before_text
        if row.approval_id is not None:  # a newer change supersedes the question
            _settle(db, row.approval_id, status="cancelled", decided_by=None)
            row.approval_id = None
        row.changed_by_session, row.changed_at = asking.session_id, now
        if change.after_digest == row.approved_digest:
            row.held_digest = row.held_text = None
        else:
            row.held_digest, row.held_text = change.after_digest, change.after_text
            row.approval_id = "appr_" + secrets.token_urlsafe(12)
            db.add(
                ApprovalRow(
                    id=row.approval_id,
                    session_id=asking.session_id,
                    turn_id=asking.turn_id,
                    tool_call_id="",
                    tool=change.name,
                    summary=asking.summary,
                    rule=INSTRUCTION_CHANGE_RULE,
                    reason=asking.reason,
                    grantable=False,
                    pattern=f"{workspace}/{change.name}",
                    requested_by=asking.requested_by,
                    created_at=now,
                    expires_at=asking.expires_at,
                )
            )
        db.add(row)
        db.commit()
        return row.approval_id


def copy_context_rows(store: Store, *, source: str, target: str) -> None:
    """A fork's copied workspace keeps what its source held: a copy is not a person's edit."""
    with store.session() as db:
        rows: Sequence[ContextFileRow] = db.exec(
            select(ContextFileRow).where(ContextFileRow.workspace == source)
        ).all()
        for row in rows:
            db.merge(ContextFileRow(**{**row.model_dump(), "workspace": target}))
        db.commit()


def decide_change(engine: Engine, *, approval_id: str, accept: bool, decided_by: str) -> bool:
    """Settle a pending instruction change and, when accepted, make the held content the
    accepted one (in every workspace holding it: a fork shares its source's question).
    False when the approval was no longer pending."""
    with Session(engine) as db:
        status = "approved" if accept else "denied"
        if not _settle(db, approval_id, status=status, decided_by=decided_by):
            db.rollback()
            return False
        held = col(ContextFileRow.approval_id) == approval_id
        if accept:
            db.exec(
                update(ContextFileRow)
                .where(held)
                .values(
                    approved_digest=ContextFileRow.held_digest,
                    approved_text=ContextFileRow.held_text,
                    held_digest=None,
                    held_text=None,
                    approval_id=None,
                )
            )
        else:  # the tool's content stays held: prompts keep the accepted one
            db.exec(update(ContextFileRow).where(held).values(approval_id=None))
        db.commit()
        return True


def _settle(db: Session, approval_id: str, *, status: str, decided_by: str | None) -> bool:
    result = db.exec(
        update(ApprovalRow)
        .where(col(ApprovalRow.id) == approval_id, col(ApprovalRow.status) == "pending")
        .values(
            status=status,
            decision={"approved": "once", "denied": "deny"}.get(status),
            decided_by=decided_by,
            decided_at=time.time(),
        )
    )
    return bool(result.rowcount)
