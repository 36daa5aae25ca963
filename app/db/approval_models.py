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


INSTRUCTION_CHANGE_RULE = "context.instruction_change"
"""The rule of an approval no turn waits on: a tool changed a workspace's context file, and
its new content joins a prompt only once a person accepts it
(app/agent/context/context_files.py)."""


class ContextFileRow(SQLModel, table=True):
    """What a person has accepted of one context file of one workspace, and what a tool left.

    A row exists only once a tool batch has changed the file; until then the file is the
    person's own and is read as it is.
    """

    __tablename__ = "context_file"

    workspace: str = Field(primary_key=True)
    """The workspace's absolute path."""
    name: str = Field(primary_key=True)
    approved_digest: str
    """sha256 of the accepted content; "" when what was accepted is no file at all."""
    approved_text: str | None = None
    """The accepted content as a prompt takes it; None when there was no file."""
    held_digest: str | None = None
    """sha256 of what a tool left there and nobody accepted yet ("" for a deletion)."""
    held_text: str | None = None
    approval_id: str | None = Field(default=None, index=True)
    """The approval that would accept `held_*`, while it is pending."""
    changed_by_session: str | None = None
    changed_at: float = Field(default_factory=_now)
