"""Held context files, in-process: which content a prompt takes after each kind of change."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.agent.approvals import ApprovalGate, ApprovalPolicy
from app.agent.context.context_files import ContextWatch, prompt_context
from app.db.approval_models import INSTRUCTION_CHANGE_RULE
from app.db.approval_store import ApprovalStore
from app.db.store import Store
from tests.support.stores import BACKENDS

STORE_BACKENDS = BACKENDS
"""Every store test here runs on SQLite and on PostgreSQL."""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _watch(store: Store, ws: Path, turn: str = "turn_1") -> ContextWatch:
    return ContextWatch(store, ws, "sess_1", turn, "key_1")


async def _tool_batch(store: Store, ws: Path, write: str | None) -> None:
    """A batch that leaves AGENTS.md holding `write` (None: removes it)."""
    watch = _watch(store, ws)
    before = watch.before()
    if write is None:
        (ws / "AGENTS.md").unlink()
    else:
        (ws / "AGENTS.md").write_text(write)
    await watch.after(before)


def _pending(store: Store) -> list[str]:
    rows = ApprovalStore(store.engine).list(status="pending")
    return [r.id for r in rows if r.rule == INSTRUCTION_CHANGE_RULE]


def _context(store: Store, ws: Path) -> str:
    return prompt_context(store, ws).removeprefix("Project context from AGENTS.md:\n")


async def test_a_tool_s_change_is_held_until_accepted(store: Store, ws: Path) -> None:
    (ws / "AGENTS.md").write_text("mine")
    await _tool_batch(store, ws, "theirs")
    assert _context(store, ws) == "mine"
    [asked] = _pending(store)
    gate = ApprovalGate(ApprovalStore(store.engine), ApprovalPolicy())
    row, grant = gate.decide(approval_id=asked, decision="once", approver="alice")
    assert row.status == "approved" and grant is None
    assert _context(store, ws) == "theirs"


async def test_a_newer_change_supersedes_and_a_revert_clears(store: Store, ws: Path) -> None:
    (ws / "AGENTS.md").write_text("mine")
    await _tool_batch(store, ws, "one")
    [first] = _pending(store)
    await _tool_batch(store, ws, "two")
    [second] = _pending(store)
    superseded = ApprovalStore(store.engine).get(approval_id=first)
    assert second != first and superseded is not None and superseded.status == "cancelled"
    await _tool_batch(store, ws, "mine")
    assert _pending(store) == [] and _context(store, ws) == "mine"


async def test_a_created_file_is_absent_until_accepted_and_denial_keeps_it_out(
    store: Store, ws: Path
) -> None:
    await _tool_batch(store, ws, "new rules")
    assert prompt_context(store, ws) == ""
    [asked] = _pending(store)
    gate = ApprovalGate(ApprovalStore(store.engine), ApprovalPolicy())
    gate.decide(approval_id=asked, decision="deny", approver="alice")
    assert prompt_context(store, ws) == ""


async def test_a_person_s_edit_after_the_tool_s_is_theirs(store: Store, ws: Path) -> None:
    (ws / "AGENTS.md").write_text("mine")
    await _tool_batch(store, ws, "theirs")
    (ws / "AGENTS.md").write_text("mine, revised")  # in an editor, outside any batch
    assert _context(store, ws) == "mine, revised"
    # ... and stays theirs when a later batch changes the file again.
    await _tool_batch(store, ws, "theirs again")
    assert _context(store, ws) == "mine, revised"


async def test_a_deletion_is_held_too(store: Store, ws: Path) -> None:
    (ws / "AGENTS.md").write_text("mine")
    await _tool_batch(store, ws, None)
    assert _context(store, ws) == "mine"


async def test_questions_outlive_a_restart(store: Store, ws: Path) -> None:
    await _tool_batch(store, ws, "theirs")
    assert ApprovalStore(store.engine).abandon_pending() == 0
    assert len(_pending(store)) == 1
