"""A session's workspace and system prompt, from its stored inputs.

Built when a session is created, and again only when a compaction, a fork or changed
client instructions have broken the cache anyway: rebuilding it on every turn would move
the memory snapshot and the date, and every request would miss the provider's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.agent.context.context_files import prompt_context
from app.agent.context.prompt import build_prompt
from app.agent.opening.tool_snapshot import snapshot_names
from app.config import Profile, Settings
from app.db.store import Store
from app.tools.memory import memory_snapshot


class SessionSetup:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def workspace(self, profile: Profile, session_id: str) -> Path:
        """Where the session works. A profile's workspace is made if missing (and must be a
        directory); a private one is made before the session's first tool batch
        (`persist_reply`, app/agent/reply_store.py). Made at the opening, it cost every new
        session a directory create (~60 µs of CPU, ~200 µs of the opening's wall time waiting
        on the file system's journal), and left an empty directory behind each session that
        never ran a tool: most of a voice bot's."""
        if profile.workspace is not None:
            _ensure_dir(profile.workspace)
        return self.workspace_path(profile, session_id)

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
        end_user: str,
        started_at: float,
        instructions: Sequence[str],
        snapshot: str,
        new_id: bool = False,
    ) -> str:
        """`new_id`: the session id was made just now, so no private workspace has it yet."""
        # No context file can be in a directory made just now, or in a private one not made
        # yet: one stat, or none, instead of one per context file's name, each a release of
        # the interpreter lock the writer thread must win back from a busy event loop.
        workspace = self.workspace_path(profile, session_id)
        if profile.workspace is not None:
            look = not _ensure_dir(workspace)
        else:
            look = not new_id and workspace.is_dir()
        return build_prompt(
            profile=profile,
            client_instructions=list(instructions),
            session_id=session_id,
            started_at=started_at,
            tool_names=snapshot_names(snapshot),
            context_file=prompt_context(self.store, workspace) if look else "",
            memory=self.memory(profile, owner=owner, end_user=end_user),
        ).render()

    def memory(self, profile: Profile, *, owner: str, end_user: str) -> str:
        """The end user's notes under the key, frozen into the new session's volatile tier."""
        if "memory" not in profile.toolsets:
            return ""
        return memory_snapshot(self.store, owner=owner, end_user=end_user)


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
