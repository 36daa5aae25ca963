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

import fnmatch
import glob
import itertools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.security.command_guard import Verdict, segments
from app.security.shell.effects import assess
from app.security.shell.findings import PathUse
from app.security.shell.syntax import ROOT
from app.security.shell.words import Value

INSTRUCTION_NAMES = frozenset({"agents.md", "claude.md", "courier.md", "gemini.md"})
"""Compared case-insensitively: on a case-insensitive filesystem `agents.md` is the file."""
PROTECTED_DIR = ".courier"
READ_ONLY_PROGRAMS = frozenset(
    {"cat", "head", "tail", "more", "grep", "egrep", "rg", "wc", "ls", "stat", "file", "du"}
    | {"diff", "cmp", "md5sum", "sha256sum", "realpath", "readlink", "test", "[", "[["}
    | {"echo", "printf"}
)
"""Programs that only read the files they name (or print the names): they write only
through a redirection, which the structural reader judges. Not `less` (`-o` writes its log
file) nor `uniq` (its second operand is its output)."""

PATH_ARGUMENTS = ("path", "file", "filename", "target", "source", "destination", "dest")
SANDBOX_WORKSPACE = "/workspace"
"""Where the sandbox mounts the workspace (`app.tools.sandbox.policy.SANDBOX_WORKSPACE`): there,
`/workspace/AGENTS.md` is the workspace's AGENTS.md."""
STATE_FILES = ("courier.db", "courier.db-wal", "courier.db-shm", "courier.db-journal")
STATE_BLOCK = Verdict(
    "block",
    "hard_block.courier_state",
    "Courier's own configuration, database and data directory are off limits",
)
_GLOB = re.compile(r"[*?[]")
_NAMED = re.compile(
    "(?:" + "|".join(re.escape(n) for n in sorted(INSTRUCTION_NAMES)) + r")(?:$|[\s;&|)<>'\"])"
    r"|\.courier(?:$|[\s/;&|)<>'\"])",
    re.IGNORECASE,  # a flag keeps its case when normalised: `less -oAGENTS.md`
)
"""An instruction file's name in a normalised command."""
MAX_MATCHES = 10_000
"""Glob matches the guard looks at before it judges the pattern itself instead."""


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
        if _real(path) in self.instruction_files or self._hard_link_to_one(workspace, path):
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

    def _hard_link_to_one(self, workspace: Path, path: Path) -> bool:
        """A second name for an instruction file (`cp -l AGENTS.md notes`): realpath cannot
        see a hard link, the inode can."""
        try:
            seen = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return False
        if seen.st_nlink < 2:
            return False
        root = _real(workspace)
        known = [root / name for name in ("AGENTS.md", "CLAUDE.md", "COURIER.md", "GEMINI.md")]
        for candidate in (*known, *self.instruction_files):
            try:
                if os.path.samestat(seen, candidate.stat()):
                    return True
            except (FileNotFoundError, NotADirectoryError):
                continue
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
                return STATE_BLOCK
        effects = assess(command)
        if (by_path := self.check_uses(workspace, effects.paths)) is not None:
            return by_path
        # The reader above judges each path a command writes by where it leads. It does not
        # know everything a program may do with a name (`uniq x AGENTS.md` writes its second
        # operand, so do `tar -x`, `git checkout` and `curl -sSLo` theirs): a program that
        # names an instruction file still asks, unless it is one that only reads. Asking for
        # every command that merely mentions one (`[[ -f AGENTS.md ]] && echo yes`) trained
        # people to click "approve". A command the reader could not read whole has no
        # judged redirections to lean on: any mention asks there, as it always did.
        if any(f.rule == "danger.unreadable" for f in effects.findings):
            mentioned = self._names_instruction_file(normalised)
        else:
            mentioned = any(
                self._names_instruction_file(" ".join((seg.program, *seg.args)))
                for seg in segments(normalised)
                if seg.program not in READ_ONLY_PROGRAMS
            )
        if mentioned:
            return Verdict(
                "approve",
                "protected.instruction_file",
                "a command touching an agent instruction file, which steers every later session",
            )
        return None

    def check_uses(self, workspace: Path, uses: Sequence[PathUse]) -> Verdict | None:
        """Every path a command writes, reads, runs or names, judged where it leads once
        expanded (`A*S.md`, `$n.md`, `{AGENTS,x}.md`, `../data/*.db`), not by its spelling.

        A path into Courier's state is refused; one that may lead there (a glob, a `cd` to
        somewhere unknown) asks. A write that may land in an instruction file asks, and so
        does a write to a path only known at run time: it may be one.
        """
        root = _real(workspace)
        asked: Verdict | None = None
        for use in uses:
            verdict = self._judge_use(root, use)
            if verdict is not None and verdict.action == "block":
                return verdict
            asked = asked or verdict
        return asked

    def _judge_use(self, root: Path, use: PathUse) -> Verdict | None:
        steers = use.role in ("write", "name")
        value = use.value
        if value is None:
            if self._end_may_be_state(use.suffix):
                return _maybe_state(use)
            return _unknown_write(use) if use.role == "write" else None
        places = _places(root, value, use.cwds)
        if value.glob and places:
            # Globs name what exists, so they are judged by what they match now; bash
            # leaves one that matches nothing as a literal (harmless) name.
            matches = _glob(places)
            if matches is None:  # too many to look at: judged by the pattern instead
                return self._judge_pattern(use, places, steers=steers)
            places = matches
        elif not places:  # relative to a directory only known at run time
            return self._judge_pattern(use, places, steers=steers)
        for place in places:
            if self.hard_blocked(place) or self.hard_blocked(Path(os.path.abspath(place))):
                return STATE_BLOCK
            if use.recursive and self._holds_state(place):
                return _maybe_state(use)
            if steers and self.protected(root, place):
                return _protected_write(use)
        return None

    def _judge_pattern(
        self, use: PathUse, places: Sequence[Path], *, steers: bool
    ) -> Verdict | None:
        """A path that cannot be looked up: whatever it COULD name counts."""
        assert use.value is not None
        if any(self._may_be_state(p) for p in places) or self._may_name_state(use.value):
            return _maybe_state(use)
        if steers and self._may_be_protected(places, use.value):
            return _protected_write(use)
        return None

    def _may_be_state(self, pattern: Path) -> bool:
        """Whether a glob (or its literal part, with links followed) could reach the data
        dir or the config file."""
        candidates = [Path(os.path.normpath(pattern))]
        parts = candidates[0].parts
        literal = next((i for i, part in enumerate(parts) if _GLOB.search(part)), len(parts))
        if literal > 0:
            candidates.append(_real(Path(*parts[:literal])).joinpath(*parts[literal:]))
        return any(
            _could_match(candidate, self.data_dir, below=True)
            or (self.config_file is not None and _could_match(candidate, self.config_file))
            for candidate in candidates
        )

    def _may_name_state(self, value: Value) -> bool:
        """A path whose directory is unknown: judged by its last component alone."""
        final = value.pattern.rstrip("/").rsplit("/", 1)[-1].lower()
        names = [*STATE_FILES, *([self.config_file.name] if self.config_file else [])]
        return bool(final) and any(fnmatch.fnmatchcase(n.lower(), final) for n in names)

    def _end_may_be_state(self, suffix: str) -> bool:
        """`$(pwd)/../data/x`: a path known only by its end, which names Courier's state
        (its database or config by name, or the data dir's name after a `..`)."""
        parts = [p.lower() for p in suffix.split("/") if p]
        names = [*STATE_FILES, *([self.config_file.name] if self.config_file else [])]
        if any(fnmatch.fnmatchcase(n.lower(), part) for part in parts for n in names):
            return True
        climbs = ".." in parts
        return climbs and any(fnmatch.fnmatchcase(self.data_dir.name.lower(), p) for p in parts)

    def _holds_state(self, place: Path) -> bool:
        """A directory that has the data dir or the config file somewhere below it."""
        real = _real(place)
        held = [self.data_dir, *([self.config_file] if self.config_file else [])]
        return any(real in target.parents for target in held)

    def _may_be_protected(self, places: Sequence[Path], value: Value) -> bool:
        components = [c for c in value.pattern.split("/") if c and c != ROOT]
        final = components[-1].lower() if components else ""
        names = INSTRUCTION_NAMES | {p.name.lower() for p in self.instruction_files}
        if final and any(fnmatch.fnmatchcase(name, final) for name in names):
            return True
        if any(fnmatch.fnmatchcase(PROTECTED_DIR, c.lower()) for c in components):
            return True
        return any(_could_match(p, f) for p in places for f in self.instruction_files)

    def _names_instruction_file(self, text: str) -> bool:
        """Whether normalised command text names an instruction file."""
        if _NAMED.search(text) is not None:
            return True
        words = text.split()
        return any(
            str(path).lower() in text or path.name.lower() in words
            for path in self.instruction_files
        )


def _glob(patterns: Sequence[Path]) -> list[Path] | None:
    """What the patterns match now (dot files only when spelled, as in bash); None when
    there are more than `MAX_MATCHES`."""
    found: list[Path] = []
    for pattern in patterns:
        for match in itertools.islice(glob.iglob(str(pattern)), MAX_MATCHES + 1 - len(found)):
            found.append(Path(match))
        if len(found) > MAX_MATCHES:
            return None
    return found


def _places(root: Path, value: Value, cwds: tuple[str, ...] | None) -> list[Path]:
    """Where a value may point: from the workspace root (`~`), from `/` (also read as the
    sandbox's `/workspace`), or from each directory the command may be in."""
    text = value.pattern if value.glob else value.text
    if text.startswith(ROOT):
        return [root / text[1:].lstrip("/")]
    if text.startswith("/"):
        places = [Path(text)]
        for alias in (SANDBOX_WORKSPACE, "/proc/self/cwd"):
            # Where the command starts, spelled from `/`: resolved here, `/proc/self/cwd`
            # would be the server's own directory.
            if text == alias or text.startswith(alias + "/"):
                places.append(root / text[len(alias) :].lstrip("/"))
        return places
    if cwds is None:
        return []
    bases = [_places(root, Value(c, c, False), ("",))[0] if c else root for c in cwds]
    return [base / text for base in bases]


def _could_match(pattern: Path, target: Path, *, below: bool = False) -> bool:
    """Whether the glob `pattern` can name `target` (or, with `below`, something in it)."""
    want, have = target.parts, pattern.parts
    if len(have) < len(want) or (not below and len(have) != len(want)):
        return False
    return all(fnmatch.fnmatchcase(t, p) for t, p in zip(want, have, strict=False))


def _shown(use: PathUse) -> str:
    return use.shown if len(use.shown) <= 120 else use.shown[:117] + "..."


def _unknown_write(use: PathUse) -> Verdict:
    return Verdict(
        "approve",
        "protected.instruction_file",
        f"a write to {_shown(use)}, a path only known when the command runs: "
        "it may be an agent instruction file",
    )


def _protected_write(use: PathUse) -> Verdict:
    return Verdict(
        "approve",
        "protected.instruction_file",
        f"a command that may write {_shown(use)}, an agent instruction file "
        "(which steers every later session)",
    )


def _maybe_state(use: PathUse) -> Verdict:
    return Verdict(
        "approve",
        "protected.courier_state",
        f"{_shown(use)} may lead into Courier's own data directory or configuration",
    )


def path_arguments(args: dict[str, object]) -> Sequence[str]:
    """String arguments that name files, by the names file tools use for them."""
    return [v for k, v in args.items() if k in PATH_ARGUMENTS and isinstance(v, str)]
