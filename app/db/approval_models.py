"""Tables for approvals: each pending or decided request for a human, and standing grants.

A pending approval is persisted before anyone is asked, so the question survives the
process that asked it (a restart marks it abandoned rather than leaving a phantom
"pending" that a later decision could resolve into a different turn).
"""

from __future__ import annotations

import time

from sqlmodel import Field, SQLModel


def _now() -> float:
    return time.time()


class ApprovalRow(SQLModel, table=True):
    __tablename__ = "approval"

    id: str = Field(primary_key=True)
    session_id: str = Field(index=True)
    turn_id: str = Field(index=True)
    tool_call_id: str
    tool: str
    summary: str
    """The command or path as shown to the human, secrets redacted."""
    rule: str
    """What made the call need approval (`danger.git_force`, `protected.instruction_file`)."""
    reason: str = ""
    grantable: bool = True
    """False for protected writes: only `once` or `deny` may answer them."""
    pattern: str = ""
    """What a `session` or `always` grant made from this approval would match."""
    requested_by: str
    """The principal (key name or owner fingerprint) whose turn asked."""
    created_at: float = Field(default_factory=_now)
    expires_at: float
    status: str = Field(default="pending", index=True)
    """pending, approved, denied, expired, cancelled or abandoned."""
    decision: str | None = None
    decided_by: str | None = None
    decided_at: float | None = None


class GrantRow(SQLModel, table=True):
    __tablename__ = "approval_grant"

    id: str = Field(primary_key=True)
    kind: str
    """`session` (lasts for one session) or `always` (a stored pattern)."""
    session_id: str | None = Field(default=None, index=True)
    tool: str
    pattern: str
    rule: str = ""
    created_by: str
    created_at: float = Field(default_factory=_now)
    approval_id: str | None = None
