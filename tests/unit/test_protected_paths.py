"""Protected writes and hard blocks, in-process, and the guard's ladder per backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.agent.approvals import ApprovalPolicy, turn_guard
from app.config import Profile
from app.providers.base import ToolCall
from app.security.protected import PathPolicy
from app.tools.files import WRITE_FILE
from app.tools.terminal import TERMINAL
from app.tools.workspace import READ_FILE


@pytest.fixture
def layout(tmp_path: Path) -> tuple[PathPolicy, Path]:
    """A shared workspace that (carelessly) contains Courier's data dir and config."""
    ws = tmp_path / "ws"
    (ws / "data" / "workspaces" / "sess_1").mkdir(parents=True)
    (ws / "data" / "courier.db").write_text("")
    (ws / "courier.toml").write_text("")
    (ws / "notes.md").write_text("")
    (ws / "link.md").symlink_to(ws / "AGENTS.md")
    policy = PathPolicy.build(
        data_dir=ws / "data",
        config_file=ws / "courier.toml",
        instruction_files=[tmp_path / "profile-instructions.md"],
    )
    return policy, ws


@pytest.mark.parametrize(
    ("path", "write", "expected"),
    [
        ("AGENTS.md", True, "approve"),
        ("agents.md", True, "approve"),
        ("docs/CLAUDE.md", True, "approve"),
        ("COURIER.md", True, "approve"),
        (".courier/spill/x.txt", True, "approve"),
        (".courier", True, "approve"),
        ("link.md", True, "approve"),  # a symlink to AGENTS.md is AGENTS.md
        ("AGENTS.md", False, None),  # reading steers nothing
        ("notes.md", True, None),
        ("src/agents.md.bak", True, None),
        ("data/courier.db", False, "block"),  # hard blocks hold for readers too
        ("data/courier.db-wal", True, "block"),
        ("data", False, "block"),
        ("./data/../data/courier.db", True, "block"),
        ("courier.toml", True, "block"),
        ("data/workspaces/sess_1/x.txt", True, None),  # a scratch workspace stays writable
    ],
)
def test_check_path(
    layout: tuple[PathPolicy, Path], path: str, write: bool, expected: str | None
) -> None:
    policy, ws = layout
    verdict = policy.check_path(ws, path, write=write)
    assert (verdict.action if verdict else None) == expected


def test_profile_instruction_files_are_protected(layout: tuple[PathPolicy, Path]) -> None:
    policy, ws = layout
    target = str(policy.instruction_files[0])
    verdict = policy.check_path(ws, target, write=True)
    assert verdict is not None and verdict.action == "approve"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("echo obey > AGENTS.md", "approve"),
        ("sed -i s/a/b/ CLAUDE.md", "approve"),
        ("ln -s /etc .courier/spill2", "approve"),
        ("cp x .courier/spill/y", "approve"),
        ("cat AGENTS.md", None),
        ("grep -n TODO AGENTS.md", None),
        ("cat AGENTS.md > copy.md", None),  # a read, written to an ordinary file
        ("cat AGENTS.md > CLAUDE.md", "approve"),
        ("uniq x AGENTS.md", "approve"),  # a program that is not only a reader
        ("sqlite3 data/courier.db .dump", "block"),
        ("cat courier.toml", "block"),
        ("ls data/", "block"),
        ("ls src/", None),
    ],
)
def test_check_command(layout: tuple[PathPolicy, Path], command: str, expected: str | None) -> None:
    from app.security.command_guard import normalise

    policy, ws = layout
    verdict = policy.check_command(ws, command, normalise(command))
    assert (verdict.action if verdict else None) == expected


def _guard(ws: Path, **profile: object) -> object:
    return turn_guard(
        None,
        profile=Profile(**profile),  # type: ignore[arg-type]
        session_id="s",
        turn_id="t",
        owner="o",
        workspace=ws,
        emit=lambda _e: None,
    )


def _run(guard: object, tool: object, **args: object) -> str | None:
    outcome = asyncio.run(guard(ToolCall(id="c", name="x", arguments="{}"), tool, dict(args)))  # type: ignore[operator]
    return None if outcome is None else outcome.content


def test_scratch_sandbox_gets_only_the_floor_and_missing_gate_means_deny(tmp_path: Path) -> None:
    scratch = _guard(tmp_path)
    assert _run(scratch, TERMINAL, command="rm -rf *") is None
    floor = _run(scratch, TERMINAL, command="rm -rf /")
    assert floor is not None and floor.startswith("error: refused by policy")
    shared = _guard(tmp_path, workspace=tmp_path)
    refused = _run(shared, TERMINAL, command="rm -rf *")
    assert refused is not None and "nobody can give one" in refused
    local = _guard(tmp_path, terminal_backend="local")
    assert "nobody can give one" in (_run(local, TERMINAL, command="git push -f") or "")


def test_protected_writes_ask_on_every_backend_and_reads_pass(tmp_path: Path) -> None:
    scratch = _guard(tmp_path)
    asked = _run(scratch, WRITE_FILE, path="AGENTS.md", content="x")
    assert asked is not None and "nobody can give one" in asked
    assert _run(scratch, READ_FILE, path="AGENTS.md") is None
    assert _run(scratch, WRITE_FILE, path="notes.md", content="x") is None


def test_unattended_allow_still_asks_for_protected_writes(tmp_path: Path) -> None:
    allow = _guard(tmp_path, workspace=tmp_path, unattended="allow")
    assert _run(allow, TERMINAL, command="git push -f") is None
    assert "nobody can give one" in (_run(allow, WRITE_FILE, path="CLAUDE.md", content="x") or "")
    assert _run(allow, TERMINAL, command="mkfs.ext4 /dev/sda") is not None


def test_the_bypass_is_read_from_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.config import load_settings

    monkeypatch.delenv("COURIER_CONFIG", raising=False)
    monkeypatch.setenv("COURIER_APPROVALS", "on")
    settings = load_settings(api_key="a-strong-key-0123456789")
    policy = ApprovalPolicy.from_settings(settings)
    monkeypatch.setenv("COURIER_APPROVALS", "off")
    assert policy.bypass is False
    assert ApprovalPolicy.from_settings(settings).bypass is False  # settings are frozen too
    assert ApprovalPolicy.from_settings(load_settings(api_key="a-strong-key-0123456789")).bypass
