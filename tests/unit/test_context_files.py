"""Context files are read beneath the workspace: a link out of it never reaches a prompt."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from app.agent.context.context_files import MAX_CONTEXT_FILE_CHARS, read_context_files

SECRET = "host-secret-9f8e7d6c5b4a"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text(SECRET)
    return host


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def _context(ws: Path) -> str:
    """As a prompt takes it, for a workspace no tool has changed (nothing held)."""
    for file in read_context_files(ws):
        if file.text is not None:
            return f"Project context from {file.name}:\n{file.text}"
    return ""


@pytest.mark.parametrize("name", ["AGENTS.md", "COURIER.md"])
def test_a_link_to_the_server_s_environment_is_refused_and_logged(
    ws: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    (ws / name).symlink_to("/proc/self/environ")
    with caplog.at_level(logging.WARNING):
        assert _context(ws) == ""
    assert f"context file {name}" in caplog.text and "refused" in caplog.text


def test_links_out_by_any_route_are_refused(ws: Path, outside: Path) -> None:
    (ws / "AGENTS.md").symlink_to(outside / "secret.txt")
    assert SECRET not in _context(ws)
    (ws / "AGENTS.md").unlink()
    # Through a symlinked parent directory, the link itself relative and innocent-looking.
    (ws / "sub").symlink_to(outside)
    (ws / "AGENTS.md").symlink_to("sub/secret.txt")
    assert SECRET not in _context(ws)
    (ws / "AGENTS.md").unlink()
    (ws / "AGENTS.md").symlink_to("../host/secret.txt")
    assert SECRET not in _context(ws)
    (ws / "AGENTS.md").unlink()
    # A second name for a file elsewhere: a hard link has nothing to show it leaves.
    os.link(outside / "secret.txt", ws / "AGENTS.md")
    assert SECRET not in _context(ws)


def test_a_refused_file_falls_through_to_the_next(ws: Path) -> None:
    (ws / "COURIER.md").symlink_to("/proc/self/environ")
    (ws / "AGENTS.md").write_text("Use tabs.")
    assert _context(ws) == "Project context from AGENTS.md:\nUse tabs."


def test_links_inside_the_workspace_still_work(ws: Path) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "agents.md").write_text("Run make test.")
    (ws / "AGENTS.md").symlink_to("docs/agents.md")
    assert _context(ws) == "Project context from AGENTS.md:\nRun make test."


def test_a_fifo_does_not_hang_and_a_huge_file_is_cut(ws: Path) -> None:
    os.mkfifo(ws / "COURIER.md")
    (ws / "AGENTS.md").write_text("x" * (MAX_CONTEXT_FILE_CHARS * 10))
    text = _context(ws)
    assert text.startswith("Project context from AGENTS.md:\n")
    assert len(text) == len("Project context from AGENTS.md:\n") + MAX_CONTEXT_FILE_CHARS


def test_a_missing_workspace_is_not_made(tmp_path: Path) -> None:
    assert _context(tmp_path / "nope") == ""
    assert not (tmp_path / "nope").exists()
