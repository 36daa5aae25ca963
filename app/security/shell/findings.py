"""What the guard found a command does: the findings that make it ask, and the paths it uses.

Shared by the reader (`effects.py`), which walks a command, and the programs it knows
(`programs.py`), which say what each one does with its words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from app.security.shell.syntax import Command, Piece, Word
from app.security.shell.words import Value

Role = Literal["write", "read", "exec", "name"]
"""`name`: an operand of a program whose use of it the guard does not know."""


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    reason: str


@dataclass(frozen=True, slots=True)
class PathUse:
    role: Role
    value: Value | None
    """None: the value depends on something the command line does not fix."""
    cwds: tuple[str, ...] | None
    """Directories a relative value may be relative to ("" is where the command starts,
    `ROOT` the workspace root); None when a `cd` went somewhere unknown."""
    shown: str
    recursive: bool = False
    """A directory read with everything below it (`grep -r x ..`, `tar c ..`)."""
    suffix: str = ""
    """For a value only known at run time: its literal end (`/courier.db` of `$d/courier.db`)."""


@dataclass(frozen=True, slots=True)
class Effects:
    findings: tuple[Finding, ...] = ()
    paths: tuple[PathUse, ...] = ()


RECURSIVE_DELETE = Finding("danger.recursive_delete", "a recursive delete")
FIND_DELETE = Finding("danger.recursive_delete", "find that deletes what it finds")
FIND_EXEC = Finding("danger.find_exec", "find that runs a command on what it finds")
GIT_FORCE = Finding("danger.git_force", "a force push rewrites shared history")
GIT_CLEAN = Finding("danger.git_clean", "git clean deletes untracked files")
GIT_RESET = Finding("danger.git_reset", "git discards uncommitted work")
GIT_CONFIG = Finding("danger.git_config", "git configured to run a program or rewrite a remote")
DECODE_EXEC = Finding("danger.decode_exec", "decoding text and executing it")
PIPE_EXEC = Finding("danger.pipe_exec", "text produced by the command is run as code")
WRITE_RUN = Finding("danger.script_written_and_run", "a script written and run in one command")
COMPUTED = Finding("danger.computed_command", "code or a command computed at run time")
EXEC_OPTION = Finding("danger.exec_option", "an option that makes a program run a command")
SCHEDULE = Finding("danger.schedule", "a command scheduled to run later, outside the turn")

ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


@dataclass(frozen=True, slots=True)
class Call:
    """One program run with its arguments, inside the command that runs it."""

    name: str
    args: tuple[Word, ...]
    command: Command
    depth: int
    per_input: bool = False
    """Run by xargs or parallel: more operands come from standard input."""

    def texts(self) -> list[str | None]:
        return [w.literal() for w in self.args]


def program_name(word: Word) -> str | None:
    text = word.literal()
    if text is None:
        return None
    return text.rsplit("/", 1)[-1].lower()


def literal_word(text: str) -> Word:
    return Word((Piece("quoted", text),))


def assignment(word: Word) -> tuple[str, tuple[Piece, ...], bool] | None:
    first = word.pieces[0] if word.pieces else None
    if first is None or first.kind != "lit":
        return None
    match = ASSIGNMENT.match(first.text)
    if match is None:
        return None
    rest = first.text[match.end() :]
    value = ((Piece("lit", rest),) if rest else ()) + word.pieces[1:]
    return match.group(1), value, bool(match.group(2))
