"""SQL for approvals and grants; the policy lives in `app/agent/approvals.py`.

Every state change of an approval is a conditional UPDATE on `status = 'pending'`, so a
human's decision and the waiting turn's timeout cannot both win: exactly one of them
moves the row, and the loser reads what the winner wrote.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence

from sqlalchemy import Engine, update
from sqlmodel import Session, col, select

from app.db.approval_models import INSTRUCTION_CHANGE_RULE, ApprovalRow, GrantRow


class ApprovalStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        *,
        session_id: str,
        turn_id: str,
        tool_call_id: str,
        tool: str,
        summary: str,
        rule: str,
        reason: str,
        grantable: bool,
        pattern: str,
        requested_by: str,
        expires_at: float,
    ) -> ApprovalRow:
        row = ApprovalRow(
            id="appr_" + secrets.token_urlsafe(12),
            session_id=session_id,
            turn_id=turn_id,
            tool_call_id=tool_call_id,
            tool=tool,
            summary=summary,
            rule=rule,
            reason=reason,
            grantable=grantable,
            pattern=pattern,
            requested_by=requested_by,
            expires_at=expires_at,
        )
        with Session(self.engine, expire_on_commit=False) as db:
            db.add(row)
            db.commit()
        return row

    def get(self, *, approval_id: str) -> ApprovalRow | None:
        with Session(self.engine, expire_on_commit=False) as db:
            return db.get(ApprovalRow, approval_id)

    def list(
        self, *, status: str | None = None, limit: int = 100, session_id: str | None = None
    ) -> Sequence[ApprovalRow]:
        with Session(self.engine, expire_on_commit=False) as db:
            query = select(ApprovalRow).order_by(col(ApprovalRow.created_at).desc())
            if status is not None:
                query = query.where(ApprovalRow.status == status)
            if session_id is not None:
                query = query.where(ApprovalRow.session_id == session_id)
            return db.exec(query.limit(limit)).all()

    def settle(
        self,
        *,
        approval_id: str,
        status: str,
        decision: str | None = None,
        decided_by: str | None = None,
    ) -> bool:
        """Move a pending approval to `status`; False when it was no longer pending."""
        with Session(self.engine) as db:
            result = db.exec(
                update(ApprovalRow)
                .where(col(ApprovalRow.id) == approval_id, col(ApprovalRow.status) == "pending")
                .values(
                    status=status, decision=decision, decided_by=decided_by, decided_at=time.time()
                )
            )
            db.commit()
            return bool(result.rowcount)

    def abandon_pending(self) -> int:
        """At startup: a pending row belongs to a turn of a dead process; nobody waits.
        An instruction change has no turn waiting on it by design: it stays pending."""
        with Session(self.engine) as db:
            result = db.exec(
                update(ApprovalRow)
                .where(
                    col(ApprovalRow.status) == "pending",
                    col(ApprovalRow.rule) != INSTRUCTION_CHANGE_RULE,
                )
                .values(status="abandoned", decided_at=time.time())
            )
            db.commit()
            return int(result.rowcount or 0)

    # ------------------------------------------------------------ grants

    def add_grant(
        self,
        *,
        kind: str,
        session_id: str | None,
        tool: str,
        pattern: str,
        rule: str,
        created_by: str,
        approval_id: str | None,
    ) -> GrantRow:
        row = GrantRow(
            id="grant_" + secrets.token_urlsafe(12),
            kind=kind,
            session_id=session_id,
            tool=tool,
            pattern=pattern,
            rule=rule,
            created_by=created_by,
            approval_id=approval_id,
        )
        with Session(self.engine, expire_on_commit=False) as db:
            db.add(row)
            db.commit()
        return row

    def grants(
        self, *, tool: str | None = None, session_id: str | None = None, kind: str | None = None
    ) -> Sequence[GrantRow]:
        with Session(self.engine, expire_on_commit=False) as db:
            query = select(GrantRow).order_by(col(GrantRow.created_at))
            if tool is not None:
                query = query.where(GrantRow.tool == tool)
            if kind is not None:
                query = query.where(GrantRow.kind == kind)
            if session_id is not None:
                query = query.where(GrantRow.session_id == session_id)
            return db.exec(query).all()

    def applicable_grants(self, *, tool: str, session_id: str) -> Sequence[GrantRow]:
        """This session's grants and every `always` grant for `tool`."""
        with Session(self.engine, expire_on_commit=False) as db:
            query = select(GrantRow).where(GrantRow.tool == tool)
            rows = db.exec(query).all()
        return [r for r in rows if r.kind == "always" or r.session_id == session_id]

    def get_grant(self, *, grant_id: str) -> GrantRow | None:
        with Session(self.engine, expire_on_commit=False) as db:
            return db.get(GrantRow, grant_id)

    def delete_grant(self, *, grant_id: str) -> bool:
        with Session(self.engine) as db:
            row = db.get(GrantRow, grant_id)
            if row is None:
                return False
            db.delete(row)
            db.commit()
            return True
