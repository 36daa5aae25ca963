"""What a shell command will do where the host is at risk: delete, run code, write, read.

Matching spellings lost to every new spelling: `rm -r -f src`, `git -c a=b push --force`,
`find . -execdir rm {} +`, `echo <b64> | base64 -d > x.sh; sh x.sh`, `python3 -c` with
`shutil.rmtree`, a protected file written as `A*S.md` or `$n.md`. So each simple command is
read the way bash will run it (`syntax`), its words expanded as far as the command line
itself fixes them (`words`), and judged by its effect:

- a recursive delete of any directory, `find` that runs or deletes, force pushes and cleans
  in any flag order, options that make a program run another command;
- code run from text the command itself produced: decoded, piped into a shell or an
  interpreter, or written to a file and then run (`cat > x.sh ...; sh x.sh`, `chmod +x x &&
  ./x`, a `conftest.py` written before `pytest`);
- interpreter one-liners and heredocs whose code deletes, starts processes, builds code or
  names at run time or opens computed paths (`interpreters`); what each program does with
  its words is `programs`;
- commands whose name is computed at run time, and text the guard cannot read.

Those are `findings`: each makes the guard ask. Every path a command writes, reads, runs or
names is a `PathUse` for `PathPolicy` (`protected.py`), which knows where the workspace, the
data dir and the instruction files are. A word whose value the command line does not fix
has no value (`None`): for a write, that means "could be anything".
"""

from __future__ import annotations

import collections
import fnmatch
import functools
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.security.shell import programs
from app.security.shell.findings import (
    COMPUTED,
    DECODE_EXEC,
    PIPE_EXEC,
    WRITE_RUN,
    Call,
    Effects,
    Finding,
    PathUse,
    Role,
    assignment,
    literal_word,
    program_name,
)
from app.security.shell.interpreters import Language, code_effects
from app.security.shell.syntax import MAX_DEPTH, ROOT, Command, Piece, Word, parse
from app.security.shell.words import (
    Binding,
    Env,
    Value,
    expand,
    has_live_glob,
    initial_env,
    name_of,
)
from app.security.shell.wrappers import unwrap

_CODE_SUFFIXES = frozenset(
    {"", ".py", ".pth", ".pyc", ".so", ".sh", ".bash", ".zsh", ".js", ".mjs", ".cjs", ".ts"}
    | {".tsx", ".jsx", ".rb", ".pl", ".pm", ".php", ".lua", ".mk", ".cmake", ".gradle", ".kts"}
    | {".rs", ".go", ".c", ".cc", ".cpp", ".h", ".java", ".cfg", ".ini", ".toml"}
)
_CODE_NAMES = frozenset(
    {"package.json", "makefile", "gnumakefile", "rakefile", "gemfile", "justfile"}
    | {"cmakelists.txt", "taskfile.yml", ".npmrc", ".yarnrc", ".yarnrc.yml", "tsconfig.json"}
)
"""Files a build or test runner reads as code: written before `make`/`pytest`/`npm test`
in the same command, they are a script written and run."""
_ASSIGNED = re.compile(r"(?<![\w$-])([A-Za-z_][A-Za-z0-9_]*)\+?=")
_ASSIGNING = re.compile(
    r"\b(?:for|select|read|mapfile|readarray|unset|getopts|export|declare|typeset|local"
    r"|readonly|let|printf)\b([^;&|\n)]*)"
)
_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _assigned_names(text: str) -> collections.Counter[str]:
    """How often each variable may be assigned anywhere in the text, over-counted on
    purpose: a name set twice (a loop, a subshell, `read`) has no single value."""
    counts: collections.Counter[str] = collections.Counter(_ASSIGNED.findall(text))
    counts.update(_DEFAULTED.findall(text))
    for match in _ASSIGNING.finditer(text):
        counts.update(_IDENTIFIER.findall(match.group(1)))
    return counts


@dataclass
class Reader:
    """Walks a command in order, keeping what it has learnt: variables, cwd, writes."""

    env: Env = field(default_factory=initial_env)
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    cwds: list[str] | None = field(default_factory=lambda: [""])
    findings: list[Finding] = field(default_factory=list)
    paths: list[PathUse] = field(default_factory=list)
    written: list[Value | None] = field(default_factory=list)
    contents: list[Value | None] = field(default_factory=list)
    """Writes that can put code in a file (not `mkdir`, `touch`, `rm`, `chmod`)."""
    executed: list[Value | None] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)
    decoded: bool = False
    ran_code: bool = False
    ran_project: bool = False

    def find(self, finding: Finding) -> None:
        if finding not in self.findings:
            self.findings.append(finding)

    # ------------------------------------------------------------ scripts and commands

    def script(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.find(Finding("danger.unreadable", "code nested too deep to read"))
            return
        parsed = parse(text)
        if parsed.unreadable:
            reason = f"a command the guard cannot read: {parsed.unreadable}"
            self.find(Finding("danger.unreadable", reason))
        for command in parsed.commands:
            self.command(command, depth)

    def command(self, command: Command, depth: int) -> None:
        for redirect in command.redirects:
            if redirect.writes:
                self.use("write", redirect.target)
            elif redirect.reads:
                self.use("read", redirect.target)
        words = list(command.words)
        start = 0
        while start < len(words) and assignment(words[start]) is not None:
            start += 1
        if start == len(words):
            for word in words:
                self.assign(word)
            return
        if program_name(words[start]) in programs.DECLARERS:
            self.declare(words[start:], depth)
            return
        for word in words[:start]:
            found = assignment(word)
            assert found is not None
            self.env.unknown.add(found[0])  # `n=x cmd`: set for cmd only, not for `$n`
        # Bash expands before it runs: `{rm,-rf,src}` is `rm -rf src`, and `f=-rf; rm $f`
        # passes `-rf`. Words only known at run time stay as they are.
        expanded = [w for word in words[start:] for w in _expanded(word, self.env)]
        self.invoke(expanded, command, depth)
        for index in range(1, len(expanded)):
            if program_name(expanded[index]) in programs.INTERESTING:
                self.invoke(expanded[index:], command, depth, scanned=True)

    def invoke(
        self, words: Sequence[Word], command: Command, depth: int, *, scanned: bool = False
    ) -> None:
        words, per_input = unwrap(words, self, depth)
        if not words:
            return
        name = program_name(words[0])
        if name is None or has_live_glob(words[0]):
            if not scanned:
                self.find(COMPUTED)  # `$(echo rm)`, `$cmd`, `/bin/r?`
            return
        call = Call(name, tuple(words[1:]), command, depth, per_input)
        if name in ("for", "select"):
            self.loop(call)
            return
        self.programs.append(name)
        if "/" in (words[0].literal() or ""):
            self.run_file(words[0])
        programs.run(self, call)

    # ------------------------------------------------------------ variables and cwd

    def assign(self, word: Word) -> None:
        found = assignment(word)
        assert found is not None
        name, value, appends = found
        if appends or self.counts[name] != 1:
            self.env.unknown.add(name)
            return
        # An assignment's value is neither brace-expanded, split nor globbed.
        flat = Word(tuple(Piece("quoted", p.text) if p.kind == "lit" else p for p in value))
        values = expand(flat, self.env)
        if values is None or len(values) != 1:
            self.env.unknown.add(name)
        else:
            self.env.bound[name] = Binding(tuple(values))

    def declare(self, words: list[Word], depth: int) -> None:
        """`export n=x`, `local n=x`: assignments; `alias x='rm -rf'`: code run later."""
        for word in words[1:]:
            found = assignment(word)
            if found is None:
                continue
            if program_name(words[0]) == "alias":
                self.code("shell", Word(found[1]).literal(), depth)
            else:
                self.assign(word)

    def loop(self, call: Call) -> None:
        texts = call.texts()
        name = name_of(texts[0] or "") if texts else None
        if name is None:
            return
        values: list[Value] = []
        if self.counts[name] == 1 and len(texts) > 1 and texts[1] == "in":
            for word in call.args[2:]:
                expanded = expand(word, self.env)
                if expanded is None:
                    self.env.unknown.add(name)
                    return
                values.extend(expanded)
            self.env.bound[name] = Binding(tuple(values))
        else:
            self.env.unknown.add(name)

    def change_dir(self, call: Call) -> None:
        self.cwds = self._moved(call)
        # `$PWD` follows: `cd .. && cat $PWD/data/x` must not read as the workspace's.
        if self.cwds is None:
            self.env.unknown.add("PWD")
        elif "PWD" not in self.env.unknown:
            places = dict.fromkeys(_join(ROOT, c) for c in self.cwds)
            self.env.bound["PWD"] = Binding(tuple(Value(p, p, False) for p in places))

    def _moved(self, call: Call) -> list[str] | None:
        """Every directory the command may be in after this `cd`: one in a subshell does
        not stick, so the old ones stay possible too."""
        operands = [w for w in call.args if not (w.literal() or "").startswith("-")]
        if call.name == "popd" or self.cwds is None:
            return None
        if not operands:
            return [*self.cwds, ROOT]
        values = expand(operands[0], self.env)
        if values is None or any(v.glob for v in values):
            return None
        moved = [*self.cwds, *(_join(b, v.text) for v in values for b in self.cwds)]
        return moved if len(moved) <= 16 else None

    # ------------------------------------------------------------ paths and code

    def use(self, role: Role, word: Word, *, content: bool = True, recursive: bool = False) -> None:
        values = expand(word, self.env)
        cwds = tuple(dict.fromkeys(self.cwds)) if self.cwds is not None else None
        found: list[Value | None] = list(values) if values is not None else [None]
        if role == "exec" and word.pieces and all(p.kind == "sub" for p in word.pieces):
            self.find(PIPE_EXEC)  # `bash <(curl ...)`, `source <(...)`
        suffix = _literal_end(word) if values is None else ""
        for value in found:
            self.paths.append(PathUse(role, value, cwds, word.display(), recursive, suffix))
        if role == "write":
            self.written.extend(found)
            if content:
                self.contents.extend(found)
        elif role == "exec":
            self.executed.extend(found)

    def run_file(self, word: Word) -> None:
        """A script or program file is run: it may also read any code file beside it."""
        self.ran_code = self.ran_project = True
        self.use("exec", word)

    def code(self, language: Language | Literal["shell"], text: str | None, depth: int) -> None:
        """Code handed to a shell or an interpreter; None when it is computed at run time."""
        self.ran_code = True
        if text is None:
            self.find(COMPUTED)
            return
        if language == "shell":
            self.script(text, depth + 1)
            return
        effects = code_effects(language, text)
        for reason in effects.reasons:
            self.find(Finding("danger.interpreter_code", f"{language} code that {reason}"))
        for path in effects.writes:
            # `os.symlink('..', 'up')` makes the parent reachable: judged like a tree read.
            self.use("write", literal_word(path), recursive=True)
        for name in effects.names:
            if name and len(name) < 4096:
                self.use("name", literal_word(name))

    def stdin_code(self, call: Call, language: Language | Literal["shell"]) -> None:
        """A shell or interpreter reading its program from standard input."""
        self.ran_code = True
        for redirect in call.command.redirects:
            if redirect.op in ("<<", "<<-", "<<<"):
                body = redirect.body
                # An unquoted heredoc is expanded first: `$x` there may be any code.
                computed = redirect.body_expands and (body is None or re.search(r"[$`]", body))
                self.code(language, None if computed else body, call.depth)
                return
            if redirect.op == "<":
                self.run_file(redirect.target)
                return
        if call.command.piped:
            self.find(PIPE_EXEC)

    # ------------------------------------------------------------ conclusions

    def conclude(self) -> Effects:
        if self.decoded and self.ran_code:
            self.find(DECODE_EXEC)
        written, executed = self.written, self.executed
        # `PATH=.:$PATH x.sh` runs a written x.sh by its bare name.
        run = [*executed, *(Value(name, name, False) for name in self.programs)]
        unknown = (None in written and executed) or (None in executed and written)
        if unknown or any(_same_file(w, x) for w in written for x in run if w and x):
            self.find(WRITE_RUN)
        if self.ran_project and any(w is None or _code_like(w) for w in self.contents):
            self.find(WRITE_RUN)
        return Effects(tuple(self.findings), tuple(self.paths))


def _expanded(word: Word, env: Env) -> list[Word]:
    values = expand(word, env)
    return [word] if values is None else [v.word() for v in values]


def _literal_end(word: Word) -> str:
    """The text after the last expansion (`/courier.db` of `$d/courier.db`)."""
    tail: list[str] = []
    for piece in reversed(word.pieces):
        if piece.kind in ("var", "sub"):
            break
        tail.append(piece.text)
    return "".join(reversed(tail))


def _join(base: str, path: str) -> str:
    if path.startswith(("/", ROOT)):
        return path
    return posixpath.join(base, path) if base else path


def _basename(value: Value) -> str:
    return posixpath.basename(value.pattern.rstrip("/")).lower()


def _same_file(written: Value, executed: Value) -> bool:
    a, b = _basename(written), _basename(executed)
    if a == b:
        return True
    return (written.glob and fnmatch.fnmatchcase(b, a)) or (
        executed.glob and fnmatch.fnmatchcase(a, b)
    )


def _code_like(value: Value) -> bool:
    name = posixpath.basename(value.text.rstrip("/")).lower()
    return value.glob or name in _CODE_NAMES or posixpath.splitext(name)[1] in _CODE_SUFFIXES


@functools.lru_cache(maxsize=256)
def assess(command: str) -> Effects:
    """Everything the guard can tell about what `command` does (pure: text in, effects out)."""
    reader = Reader(counts=_assigned_names(command))
    reader.script(command, 0)
    return reader.conclude()
