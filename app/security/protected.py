"""Paths no tool may touch, and paths every write to which needs a human.

Two different dangers. Courier's own config file, database and data directory are where
"approvals off" and every session live: one successful write there collapses the whole
approval ladder or rewrites history, so they are refused outright, for every tool, always.
Agent instruction files (`AGENTS.md`, `CLAUDE.md`, `COURIER.md`, anything under
`.courier/`, and the profile's own instruction files) steer every later session that reads
them: an injected instruction written there outlives the turn. Damage from a command is
bounded by a session; a rewritten instruction file is not. So each write to one needs a
human approval, one write at a time, even with approvals off, never through a grant.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.security.command_guard import Verdict, has_compound_operators, segments

INSTRUCTION_NAMES = frozenset({"agents.md", "claude.md", "courier.md", "gemini.md"})
"""Compared case-insensitively: on a case-insensitive filesystem `agents.md` is the file."""
PROTECTED_DIR = ".courier"
READ_ONLY_PROGRAMS = frozenset(
    {"cat", "head", "tail", "less", "more", "grep", "egrep", "rg", "wc", "ls", "stat", "file"}
    | {"diff", "cmp", "md5sum", "sha256sum", "realpath", "readlink", "test", "[", "du"}
)
"""A simple command (no compound operators) running one of these only reads what it names."""

PATH_ARGUMENTS = ("path", "file", "filename", "target", "source", "destination", "dest")


RESOLVE_ATTEMPTS = 3


class PathChanged(OSError):
    """A path kept changing while the guard resolved it (a directory swapped for a link)."""


def _real(path: Path) -> Path:
    """`realpath`, for a path another process may be changing under us.

    realpath lstat()s a component and then readlink()s it: when the directory is swapped
    for a symlink (or back) in between, that raises EINVAL or ENOENT, and an uncaught
    error here ended the whole turn with a 500. A short retry rides out a one-off swap;
    a path that keeps changing is a `PathChanged`, which the guard turns into a refusal.
    """
    for _ in range(RESOLVE_ATTEMPTS - 1):
        try:
            return Path(os.path.realpath(path))
        except OSError:
            continue
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise PathChanged(exc.errno, f"{path} changed while it was being checked") from exc


@dataclass(frozen=True, slots=True)
class PathPolicy:
    """Built once at startup from the settings: frozen, like every trust decision."""

    data_dir: Path
    config_file: Path | None = None
    instruction_files: tuple[Path, ...] = ()

    @classmethod
    def build(
        cls, *, data_dir: Path, config_file: Path | None, instruction_files: Iterable[Path] = ()
    ) -> PathPolicy:
        return cls(
            data_dir=_real(data_dir),
            config_file=_real(config_file) if config_file else None,
            instruction_files=tuple(_real(p) for p in instruction_files),
        )

    @property
    def scratch_root(self) -> Path:
        """Per-session workspaces live here, inside the data dir, and stay writable."""
        return self.data_dir / "workspaces"

    def hard_blocked(self, path: Path) -> bool:
        real = _real(path)
        if self.config_file is not None and real == self.config_file:
            return True
        inside_data = real == self.data_dir or self.data_dir in real.parents
        in_scratch = real == self.scratch_root or self.scratch_root in real.parents
        return inside_data and not in_scratch

    def protected(self, workspace: Path, path: Path) -> bool:
        """An instruction file, judged on both spellings: the path as written (so a
        `.courier/link` pointing elsewhere still counts) and where it really leads."""
        if _real(path) in self.instruction_files:
            return True
        root = _real(workspace)
        for candidate in (Path(os.path.abspath(path)), _real(path)):
            try:
                parts = candidate.relative_to(root).parts
            except ValueError:
                continue
            if any(part.lower() in INSTRUCTION_NAMES for part in parts[-1:]):
                return True
            if any(part.lower() == PROTECTED_DIR for part in parts):
                return True
        return False

    def check_path(self, workspace: Path, raw: str, *, write: bool) -> Verdict | None:
        """The verdict for a file tool's path argument, or None when the path is ordinary."""
        if "\x00" in raw:
            return None  # the tool itself refuses it with a clearer message
        path = Path(raw) if Path(raw).is_absolute() else workspace / raw
        if write and _real(path) in self.instruction_files:
            return Verdict(
                "approve",
                "protected.instruction_file",
                "a write to one of the profile's instruction files",
            )
        root = _real(workspace)
        lexical, real = Path(os.path.abspath(path)), _real(path)
        if not any(p == root or root in p.parents for p in (lexical, real)):
            return None  # the file tool refuses it as outside the workspace, more clearly
        if self.hard_blocked(path) or self.hard_blocked(Path(os.path.abspath(path))):
            return Verdict(
                "block",
                "hard_block.courier_state",
                "Courier's own configuration, database and data directory are off limits",
            )
        if write and self.protected(workspace, path):
            return Verdict(
                "approve",
                "protected.instruction_file",
                "a write to an agent instruction file, which steers every later session",
            )
        return None

    # ------------------------------------------------------------ shell commands

    def _hard_tokens(self, workspace: Path) -> list[str]:
        tokens = [str(self.data_dir), "courier.db"]
        if self.config_file is not None:
            tokens += [str(self.config_file), self.config_file.name]
        root = _real(workspace)
        if self.data_dir == root or root in self.data_dir.parents:
            tokens.append(str(self.data_dir.relative_to(root)) if self.data_dir != root else ".")
        return [t.lower() for t in tokens if t and t != "."]

    def check_command(self, workspace: Path, command: str, normalised: str) -> Verdict | None:
        """Commands that name Courier's state (refused) or an instruction file (asked).

        Text matching cannot see every way a shell can reach a file, which is why the
        scratch sandbox does not mount these paths at all; on a host workspace this is
        the boundary the issue asks for, and it errs towards asking.
        """
        for token in self._hard_tokens(workspace):
            if re.search(rf"(?:^|[\s=<>:(/.]){re.escape(token)}(?:$|[\s/;&|)<>:])", normalised):
                return Verdict(
                    "block",
                    "hard_block.courier_state",
                    "Courier's own configuration, database and data directory are off limits",
                )
        names = "|".join(re.escape(n) for n in sorted(INSTRUCTION_NAMES))
        pattern = rf"(?:{names})(?:$|[\s;&|)<>'\"])|\.courier(?:$|[\s/;&|)<>'\"])"
        named = re.search(pattern, normalised) is not None
        if not named and not any(self._names_file(normalised, p) for p in self.instruction_files):
            return None
        segs = segments(normalised)
        simple_read = (
            not has_compound_operators(command)
            and len(segs) == 1
            and segs[0].program in READ_ONLY_PROGRAMS
        )
        if simple_read:
            return None
        return Verdict(
            "approve",
            "protected.instruction_file",
            "a command touching an agent instruction file, which steers every later session",
        )

    @staticmethod
    def _names_file(normalised: str, path: Path) -> bool:
        return str(path).lower() in normalised or path.name.lower() in normalised.split()


def path_arguments(args: dict[str, object]) -> Sequence[str]:
    """String arguments that name files, by the names file tools use for them."""
    return [v for k, v in args.items() if k in PATH_ARGUMENTS and isinstance(v, str)]
