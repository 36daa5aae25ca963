"""Approvals: which tool calls run, which are refused, and which wait for a human.

The order of `TurnGuard.judge` is the design, and the bypass comes late on purpose:

1. the command guard's floor, the `sudo -S` guard and the operator's deny globs refuse;
2. Courier's own config, database and data directory are refused for every tool (a path
   that may lead there, a glob or a `cd` somewhere unknown, asks);
3. a write to an agent instruction file asks a human, every time, bypass or not, and a
   `session` or `always` answer is refused for it (only `once` or `deny`). Paths are
   judged where they lead after expansion (`A*S.md`, `$n.md`), and a write to a path only
   known at run time counts as one. So is the change itself, by whatever command it was
   made, before later prompts take it (`context.instruction_change`, raised by
   app/agent/context/context_files.py; no turn waits);
4. only now: approvals off (frozen at startup), the allowlist, standing grants and the
   profile's unattended mode may let a dangerous call through without asking.

The bypass is a value on the policy, copied from the settings when the process starts;
nothing here reads the environment. Reading it per call would let one line of code run
inside the process (a plugin, a generated script imported by a tool) switch every check
off with `os.environ["COURIER_APPROVALS"] = "off"`.

Missing state means deny: a turn without a gate (no way to reach a human) gets the
floor and the hard blocks, and every call that would need a human is refused.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.agent.events import ApprovalRequested, ApprovalResolved, TurnEvent
from app.config import Profile, Settings, config_file_path
from app.db.approval_models import INSTRUCTION_CHANGE_RULE, ApprovalRow, GrantRow
from app.db.approval_store import ApprovalStore
from app.db.context_store import decide_change
from app.providers.base import ToolCall
from app.security.command_guard import Verdict, allowlisted, check_command
from app.security.protected import PathPolicy, path_arguments
from app.security.redact import redact_text
from app.tools.call_repair import coerce_arguments
from app.tools.mcp.names import server_of
from app.tools.registry import Tool, ToolOutcome

log = logging.getLogger(__name__)

Decision = Literal["once", "session", "always", "deny"]
DECISIONS: tuple[Decision, ...] = ("once", "session", "always", "deny")
CODE_ARGUMENTS = ("command", "cmd", "script", "code")
"""A tool taking one of these as a string runs code, so the command guard reads it."""
MAX_SUMMARY_CHARS = 2000


class ApprovalNotFound(Exception):
    pass


class ApprovalConflict(Exception):
    """The approval is no longer pending (decided, expired, or its turn has ended)."""


class ApprovalRefused(Exception):
    """The decision is not allowed (self-approval under separate_approver, a grant on a
    protected write)."""


def _bypass(value: str) -> bool:
    return value.strip().lower() in ("off", "false", "0", "no", "yolo")


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Everything trust-related, fixed when the process starts."""

    bypass: bool = False
    """`COURIER_APPROVALS=off`: dangerous commands run unasked (floor and protected writes
    still hold)."""
    deny_globs: tuple[str, ...] = ()
    allow_globs: tuple[str, ...] = ()
    separate_approver: bool = False
    paths: PathPolicy = field(default_factory=lambda: PathPolicy(data_dir=Path("/nonexistent")))

    @classmethod
    def from_settings(cls, settings: Settings) -> ApprovalPolicy:
        instruction_files = [f for p in settings.all_profiles() for f in p.instruction_files]
        return cls(
            bypass=_bypass(settings.approvals),
            deny_globs=tuple(settings.approvals_deny),
            allow_globs=tuple(settings.approvals_allow),
            separate_approver=settings.approvals_separate_approver,
            paths=PathPolicy.build(
                data_dir=settings.data_dir,
                config_file=config_file_path(),
                mcp_config=settings.mcp_config,
                instruction_files=instruction_files,
            ),
        )


def full_ladder(profile: Profile) -> bool:
    """The host backend, or a sandbox whose workspace is a shared host directory: the
    command reaches real files, so every dangerous pattern asks."""
    return profile.terminal_backend == "local" or profile.workspace is not None


def refusal(text: str) -> ToolOutcome:
    return ToolOutcome(f"error: {text}", is_error=True)


def _summary(tool: Tool, args: Mapping[str, Any]) -> str:
    if tool.approval != "judge":  # an MCP tool: what a human approves is its arguments
        shown = json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
        return redact_text(f"{tool.name} {shown}")[:MAX_SUMMARY_CHARS]
    for name in CODE_ARGUMENTS:
        if isinstance(args.get(name), str):
            return redact_text(str(args[name]))[:MAX_SUMMARY_CHARS]
    paths = ", ".join(path_arguments(dict(args))) or "(no path)"
    body = args.get("content", args.get("new_string", ""))
    text = f"{tool.name} {paths}"
    if isinstance(body, str) and body:
        text += "\n---\n" + body
    return redact_text(text)[:MAX_SUMMARY_CHARS]


MCP_ALWAYS_RULE = "mcp.always"


def needs_human(rule: str) -> bool:
    """A verdict no bypass, standing grant or unattended mode may answer: a protected
    path, or a server the operator marked `approval: always`."""
    return rule.startswith("protected.") or rule == MCP_ALWAYS_RULE


def mcp_verdict(tool: Tool) -> Verdict:
    server = server_of(tool.name)
    if tool.approval == "ask_always":
        reason = f"the operator asks for approval of every call to MCP server {server}"
        return Verdict("approve", rule=MCP_ALWAYS_RULE, reason=reason)
    if tool.approval == "ask":
        reason = f"MCP server {server} does not mark {tool.name} as read-only"
        return Verdict("approve", rule="mcp.changes", reason=reason)
    return Verdict("allow")


def _escape_glob(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


class ApprovalGate:
    """Server-wide: persists questions, parks the asking call, and resolves it once."""

    def __init__(
        self,
        store: ApprovalStore,
        policy: ApprovalPolicy,
        *,
        names: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.policy = policy
        self.names = dict(names or {})
        """Owner fingerprint -> principal name, for `requested_by`."""
        self.clock = clock
        self._waiters: dict[str, asyncio.Future[Decision]] = {}

    def name_of(self, owner: str) -> str:
        return self.names.get(owner, owner)

    async def ask(
        self,
        *,
        session_id: str,
        turn_id: str,
        call: ToolCall,
        verdict: Verdict,
        summary: str,
        pattern: str,
        requested_by: str,
        timeout_s: float,
        emit: Callable[[TurnEvent], None],
    ) -> Decision | Literal["expired"]:
        grantable = not needs_human(verdict.rule)
        row = self.store.create(
            session_id=session_id,
            turn_id=turn_id,
            tool_call_id=call.id,
            tool=call.name,
            summary=summary,
            rule=verdict.rule,
            reason=verdict.reason,
            grantable=grantable,
            pattern=pattern,
            requested_by=requested_by,
            expires_at=self.clock() + timeout_s,
        )
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        self._waiters[row.id] = future
        log.info(
            "approval %s: %s call %s waits for a human (%s)",
            row.id,
            call.name,
            call.id,
            verdict.rule,
        )
        emit(ApprovalRequested(row.id, call.id, call.name, summary, row.expires_at, grantable))
        status = "cancelled"
        try:
            try:
                decision: Decision | Literal["expired"] = await asyncio.wait_for(
                    asyncio.shield(future), timeout=timeout_s
                )
            except TimeoutError:
                if self.store.settle(approval_id=row.id, status="expired"):
                    decision = "expired"
                else:  # a human decided in the same instant: their decision stands
                    decided = self.store.get(approval_id=row.id)
                    decision = _as_decision(decided.decision if decided else None)
            status = {"expired": "expired", "deny": "denied"}.get(decision, "approved")
            return decision
        except asyncio.CancelledError:
            self.store.settle(approval_id=row.id, status="cancelled")
            raise
        finally:
            self._waiters.pop(row.id, None)
            emit(ApprovalResolved(row.id, call.id, status))

    def decide(
        self, *, approval_id: str, decision: str, approver: str
    ) -> tuple[ApprovalRow, GrantRow | None]:
        """Apply a human's decision; raises when it cannot be applied as asked."""
        row = self.store.get(approval_id=approval_id)
        if row is None:
            raise ApprovalNotFound(approval_id)
        if decision not in DECISIONS:
            raise ApprovalRefused(f"decision must be one of {', '.join(DECISIONS)}")
        if row.rule == INSTRUCTION_CHANGE_RULE:
            return self._decide_instruction_change(row, decision, approver), None
        future = self._waiters.get(approval_id)
        if row.status != "pending" or future is None or future.done():
            if row.status == "pending":  # its turn is gone (a crash left it): close it
                self.store.settle(approval_id=approval_id, status="abandoned")
            raise ApprovalConflict(f"approval {approval_id} is {row.status}, not pending")
        if not row.grantable and decision in ("session", "always"):
            raise ApprovalRefused(
                "this call touches a protected path (an agent instruction file, or one that "
                "may lead into Courier's own state) or a tool whose server asks every time: "
                "it can only be approved once or denied, never by a standing grant"
            )
        if self.policy.separate_approver and approver == row.requested_by:
            raise ApprovalRefused(
                "approvals.separate_approver is set: the requester may not approve its own call"
            )
        status = "denied" if decision == "deny" else "approved"
        if not self.store.settle(
            approval_id=approval_id, status=status, decision=decision, decided_by=approver
        ):
            raise ApprovalConflict(f"approval {approval_id} was settled meanwhile")
        grant: GrantRow | None = None
        if decision in ("session", "always"):
            grant = self.store.add_grant(
                kind=decision,
                session_id=row.session_id if decision == "session" else None,
                tool=row.tool,
                pattern=row.pattern if decision == "session" else _escape_glob(row.pattern),
                rule=row.rule,
                created_by=approver,
                approval_id=row.id,
            )
        future.set_result(decision)
        settled = self.store.get(approval_id=approval_id)
        assert settled is not None
        return settled, grant

    def _decide_instruction_change(
        self, row: ApprovalRow, decision: Decision, approver: str
    ) -> ApprovalRow:
        """A held context-file change: no turn waits; the decision is applied to the file's
        record in the same transaction (app/db/context_store.py)."""
        if row.status != "pending":
            raise ApprovalConflict(f"approval {row.id} is {row.status}, not pending")
        if decision in ("session", "always"):
            raise ApprovalRefused(
                "this is a change to an agent instruction file: it can only be approved "
                "once or denied, never by a standing grant"
            )
        if self.policy.separate_approver and approver == row.requested_by:
            raise ApprovalRefused(
                "approvals.separate_approver is set: the requester may not approve its own call"
            )
        if row.expires_at < self.clock():
            self.store.settle(approval_id=row.id, status="expired")
            raise ApprovalConflict(f"approval {row.id} has expired")
        if not decide_change(
            self.store.engine, approval_id=row.id, accept=decision == "once", decided_by=approver
        ):
            raise ApprovalConflict(f"approval {row.id} was settled meanwhile")
        settled = self.store.get(approval_id=row.id)
        assert settled is not None
        return settled

    def granted(self, *, tool: str, session_id: str, pattern: str, command: str | None) -> bool:
        for grant in self.store.applicable_grants(tool=tool, session_id=session_id):
            if grant.kind == "session" and grant.pattern == pattern:
                return True
            if grant.kind == "always":
                if command is not None and allowlisted(command, [grant.pattern]):
                    return True
                if command is None and fnmatch.fnmatchcase(pattern, grant.pattern):
                    return True
        return False


def _as_decision(value: str | None) -> Decision:
    return value if value in DECISIONS else "deny"


@dataclass
class TurnGuard:
    """One turn's view of the gate: called before every tool call of the turn runs."""

    gate: ApprovalGate | None
    policy: ApprovalPolicy
    profile: Profile
    session_id: str
    turn_id: str
    owner: str
    workspace: Path
    emit: Callable[[TurnEvent], None]

    def judge(self, tool: Tool, args: Mapping[str, Any]) -> tuple[Verdict, str | None]:
        """The verdict for one call, before bypass and grants; and the command, if any."""
        if tool.approval != "judge":
            # An MCP tool: its arguments mean something on the server, not in this
            # workspace, so the operator's choice for the server decides, not its paths.
            return mcp_verdict(tool), None
        command = next((args[n] for n in CODE_ARGUMENTS if isinstance(args.get(n), str)), None)
        ladder = full_ladder(self.profile)
        if command is not None:
            verdict = check_command(command, deny_globs=self.policy.deny_globs, full_ladder=ladder)
            if verdict.action == "block":
                return verdict, command
            if ladder:
                special = self.policy.paths.check_command(
                    self.workspace, command, verdict.normalised
                )
                if special is not None:
                    return special, command
            return verdict, command
        found: Verdict | None = None
        for raw in path_arguments(dict(args)):
            verdict_for_path = self.policy.paths.check_path(
                self.workspace, raw, write=not tool.read_only
            )
            if verdict_for_path is None:
                continue
            if verdict_for_path.action == "block":
                return verdict_for_path, None
            found = verdict_for_path
        return found or Verdict("allow"), None

    async def __call__(
        self, call: ToolCall, tool: Tool, raw_args: dict[str, Any]
    ) -> ToolOutcome | None:
        args = coerce_arguments(raw_args, tool.parameters)
        try:
            # In a thread: reading a 100 KB command and resolving its paths takes long
            # enough to stall every other session's turn if done on the event loop.
            verdict, command = await asyncio.to_thread(self.judge, tool, args)
        except OSError as exc:
            # A path the model named changed while it was checked (another session swapping
            # a directory for a link): unjudged means not run, and the turn goes on.
            log.warning("could not judge %s call %s: %s", tool.name, call.id, exc)
            return refusal(
                f"a path in this call changed while it was being checked ({exc.strerror}), "
                "so the call was not run."
            )
        if verdict.action == "allow":
            return None
        if verdict.action == "block":
            log.warning("refused %s call %s: %s", tool.name, call.id, verdict.rule)
            return refusal(
                f"refused by policy ({verdict.reason}). This is final: do not retry it or try "
                "another way to do the same thing; tell the user what you wanted to do."
            )
        protected = needs_human(verdict.rule)
        pattern = (
            verdict.normalised if command is not None else ",".join(path_arguments(dict(args)))
        )
        if not protected and self._waved_through(tool, pattern, command):
            return None
        unattended = self.profile.unattended
        if unattended == "allow" and not protected:
            return None
        if unattended == "deny" or self.gate is None:
            return refusal(
                f"this call needs a human approval ({verdict.reason}) and nobody can give one "
                "here, so it was not run. Do not retry it; tell the user it needs approval."
            )
        decision = await self.gate.ask(
            session_id=self.session_id,
            turn_id=self.turn_id,
            call=call,
            verdict=verdict,
            summary=_summary(tool, args),
            pattern=pattern,
            requested_by=self.gate.name_of(self.owner),
            timeout_s=self.profile.approval_timeout_s,
            emit=self.emit,
        )
        if decision == "expired":
            return refusal(
                f"this call needed a human approval ({verdict.reason}) and none came within "
                f"{self.profile.approval_timeout_s:g} s, so it was not run. Do not retry it; "
                "tell the user it is waiting for their approval."
            )
        if decision == "deny":
            return refusal(
                "a human denied this call, so it was not run. Do not retry it or work around "
                "it; ask the user how they want to proceed."
            )
        return None

    def _waved_through(self, tool: Tool, pattern: str, command: str | None) -> bool:
        if self.policy.bypass:
            return True
        if command is not None and allowlisted(command, self.policy.allow_globs):
            return True
        return self.gate is not None and self.gate.granted(
            tool=tool.name, session_id=self.session_id, pattern=pattern, command=command
        )


def turn_guard(
    gate: ApprovalGate | None,
    *,
    profile: Profile,
    session_id: str,
    turn_id: str,
    owner: str,
    workspace: Path,
    emit: Callable[[TurnEvent], None],
) -> TurnGuard:
    policy = gate.policy if gate is not None else ApprovalPolicy()
    return TurnGuard(gate, policy, profile, session_id, turn_id, owner, workspace, emit)


def visible_fields(row: ApprovalRow) -> dict[str, Any]:
    """The approval as the API shows it."""
    return {
        "id": row.id,
        "object": "courier.approval",
        "session_id": row.session_id,
        "turn_id": row.turn_id,
        "tool_call_id": row.tool_call_id,
        "tool": row.tool,
        "summary": row.summary,
        "rule": row.rule,
        "reason": row.reason,
        "grantable": row.grantable,
        "requested_by": row.requested_by,
        "created_at": row.created_at,
        "expires_at": row.expires_at,
        "status": row.status,
        "decision": row.decision,
        "decided_by": row.decided_by,
        "decided_at": row.decided_at,
    }


def grant_fields(row: GrantRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "courier.approval_grant",
        "kind": row.kind,
        "session_id": row.session_id,
        "tool": row.tool,
        "pattern": row.pattern,
        "rule": row.rule,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "approval_id": row.approval_id,
    }
