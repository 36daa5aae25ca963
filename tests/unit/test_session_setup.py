"""A new session's workspace and the project context file its prompt takes from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.agent.opening.session_setup import SessionSetup
from app.config import Profile, load_settings
from app.db.store import Store

KEY = "sk-courier-setup-0123456789abcdef"
NO_MEMORY = ("core",)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[SessionSetup]:
    settings = load_settings(api_key=KEY, data_dir=tmp_path, upstream_base_url="http://127.0.0.1:9")
    store = Store.open(tmp_path / "courier.db")
    yield SessionSetup(settings, store)
    store.close()


def _prompt(setup: SessionSetup, profile: Profile, session_id: str = "sess_1") -> str:
    return setup.prompt(
        profile,
        session_id=session_id,
        owner="key_1",
        end_user="",
        started_at=0.0,
        instructions=(),
        snapshot="[]",
    )


def test_a_private_workspace_is_left_to_the_first_tool_batch(setup: SessionSetup) -> None:
    profile = Profile(toolsets=NO_MEMORY)
    prompt = _prompt(setup, profile)
    # Neither the prompt nor a later turn's context makes it: a session that never runs a
    # tool leaves no directory behind.
    assert not setup.private_workspace("sess_1").exists()
    assert setup.workspace(profile, "sess_1") == setup.private_workspace("sess_1")
    assert not setup.private_workspace("sess_1").exists()
    assert "Project context" not in prompt
    setup.private_workspace("sess_1").mkdir(parents=True)  # as the first tool batch makes it
    # A later rebuild (a compaction) reads what the agent has written there since.
    (setup.private_workspace("sess_1") / "AGENTS.md").write_text("Use tabs.")
    assert "Project context from AGENTS.md:\nUse tabs." in _prompt(setup, profile)


def test_a_new_session_id_s_prompt_looks_for_no_workspace(
    setup: SessionSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session id made just now has no private workspace: its prompt asks the file system
    nothing (a stat, and the interpreter lock the writer thread then waits to win back)."""
    looked: list[Path] = []
    is_dir = Path.is_dir

    def counted(path: Path) -> bool:
        looked.append(path)
        return is_dir(path)

    monkeypatch.setattr(Path, "is_dir", counted)
    profile = Profile(toolsets=NO_MEMORY)
    setup.prompt(
        profile,
        session_id="sess_new",
        owner="key_1",
        end_user="",
        started_at=0.0,
        instructions=(),
        snapshot="[]",
        new_id=True,
    )
    assert looked == []
    _prompt(setup, profile)  # an existing session's rebuild looks once
    assert looked == [setup.private_workspace("sess_1")]


def test_a_workspace_that_already_exists_gives_its_context_file(
    setup: SessionSetup, tmp_path: Path
) -> None:
    shared = tmp_path / "project"
    shared.mkdir()
    (shared / "COURIER.md").write_text("Run make test before committing.")
    prompt = _prompt(setup, Profile(toolsets=NO_MEMORY, workspace=shared))
    assert "Project context from COURIER.md:\nRun make test before committing." in prompt
    # A fork's copied private workspace exists before its prompt is built: read as well.
    copied = setup.private_workspace("sess_fork")
    copied.mkdir(parents=True)
    (copied / "AGENTS.md").write_text("Forked notes.")
    assert "Forked notes." in _prompt(setup, Profile(toolsets=NO_MEMORY), "sess_fork")


def test_a_workspace_path_that_is_a_file_is_refused(setup: SessionSetup, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(FileExistsError):
        _prompt(setup, Profile(toolsets=NO_MEMORY, workspace=blocker))
    with pytest.raises(FileExistsError):
        setup.workspace(Profile(workspace=blocker), "sess_1")


def test_a_profile_workspace_is_made_if_missing(setup: SessionSetup, tmp_path: Path) -> None:
    shared = tmp_path / "team" / "project"
    assert setup.workspace(Profile(workspace=shared), "sess_1") == shared
    assert shared.is_dir()


def test_a_prompt_never_carries_the_server_s_environment(setup: SessionSetup) -> None:
    """A link the model planted in its workspace is refused (app/agent/context/context_files.py)."""
    workspace = setup.private_workspace("sess_1")
    workspace.mkdir(parents=True)
    (workspace / "AGENTS.md").symlink_to("/proc/self/environ")
    prompt = _prompt(setup, Profile(toolsets=NO_MEMORY))
    assert "Project context" not in prompt and "PATH=" not in prompt
