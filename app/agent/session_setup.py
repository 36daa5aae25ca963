"""A session's workspace and system prompt, from its stored inputs.

Built when a session is created, and again only when a compaction, a fork or changed
client instructions have broken the cache anyway: rebuilding it on every turn would move
the memory snapshot and the date, and every request would miss the provider's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.agent.prompt import build_prompt
from app.agent.tool_snapshot import snapshot_names
from app.config import Profile, Settings
from app.db.store import Store
from app.tools.memory import memory_snapshot


class SessionSetup:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def workspace(self, profile: Profile, session_id: str) -> Path:
        path = self.workspace_path(profile, session_id)
        _ensure_dir(path)
        return path

    def workspace_path(self, profile: Profile, session_id: str) -> Path:
        """Where the session works, without making sure it exists."""
        return profile.workspace or self.private_workspace(session_id)

    def private_workspace(self, session_id: str) -> Path:
        """Where a session without a profile workspace keeps its files (may not exist)."""
        return self.settings.data_dir / "workspaces" / session_id

    def prompt(
        self,
        profile: Profile,
        *,
        session_id: str,
        owner: str,
        started_at: float,
        instructions: Sequence[str],
        snapshot: str,
    ) -> str:
        workspace = self.workspace_path(profile, session_id)
        # A directory made just now holds no context file: not looking saves two stats on
        # a new session's opening, each a release of the interpreter lock that the writer
        # thread must win back from a busy event loop.
        made = _ensure_dir(workspace)
        return build_prompt(
            profile=profile,
            client_instructions=list(instructions),
            session_id=session_id,
            started_at=started_at,
            tool_names=snapshot_names(snapshot),
            workspace=None if made else workspace,
            memory=self.memory(owner, profile),
        ).render()

    def memory(self, owner: str, profile: Profile) -> str:
        """The principal's notes, frozen into the new session's volatile tier."""
        if "memory" not in profile.toolsets:
            return ""
        return memory_snapshot(self.store, owner=owner)


def _ensure_dir(path: Path) -> bool:
    """Make `path` (and its parents) if missing; True when this call made it."""
    try:
        path.mkdir()
    except FileExistsError:
        if not path.is_dir():
            raise
        return False
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
    return True
