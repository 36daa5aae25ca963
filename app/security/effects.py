"""What a shell command will do where the host is at risk: delete, run code, write, read.

Matching spellings lost to every new spelling: `rm -r -f src`, `git -c a=b push --force`,
`find . -execdir rm {} +`, `echo <b64> | base64 -d > x.sh; sh x.sh`, `python3 -c` with
`shutil.rmtree`, a protected file written as `A*S.md` or `$n.md`. So each simple command is
read the way bash will run it (`shell_syntax`), its words expanded as far as the command line
itself fixes them (`words`), and judged by its effect:

- a recursive delete of any directory, `find` that runs or deletes, force pushes and cleans
  in any flag order, options that make a program run another command;
- code run from text the command itself produced: decoded, piped into a shell or an
  interpreter, or written to a file and then run (`cat > x.sh ...; sh x.sh`, `chmod +x x &&
  ./x`, a `conftest.py` written before `pytest`);
- interpreter one-liners and heredocs whose code deletes, starts processes, builds code or
  names at run time or opens computed paths (`interpreter_code`);
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from app.security.interpreter_code import Language, code_effects
from app.security.shell_syntax import MAX_DEPTH, ROOT, Command, Piece, Word, parse
from app.security.words import Binding, Env, Value, expand, has_live_glob, initial_env, name_of

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

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish", "rbash"})
_PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*$")
_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"}
    | {"coproc", "function", "case", "esac", "in", "((", "))"}
)
_TEXT_PROGRAMS = frozenset(
    {"echo", "printf", "true", "false", "exit", "return", "sleep", "seq", "expr", "yes"}
    | {"date", "alias", "type", "which", "hash", "set", "shopt", "trap", "kill", "wait"}
    | {"jobs", "read", "shift", "break", "continue", "export", "declare", "local", "unset"}
    | {"readonly", "typeset", "let", "getopts", "umask", "ulimit", "pwd", "whoami", "id"}
    | {"uname", "printenv", "cd", "pushd", "popd", "dirs", "history", "test", "[", "[["}
    | {"]]"}
)
"""Programs whose operands are text, not paths."""
_READERS = frozenset(
    {"cat", "head", "tail", "less", "more", "grep", "egrep", "fgrep", "rg", "ag", "wc", "ls"}
    | {"stat", "file", "diff", "cmp", "md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum"}
    | {"realpath", "readlink", "du", "od", "hexdump", "strings", "nl", "cut", "column", "jq"}
    | {"bat", "tac", "fold", "fmt", "pr", "paste", "join", "comm", "zless", "zgrep", "tree"}
    | {"cksum", "sum", "rev", "uniq", "zcat", "bzcat", "xzcat", "sqlite3", "tr"}
)
_RECURSIVE_READERS = frozenset({"rg", "ag", "zgrep"})
"""Readers that descend into directories by default."""
_DECODERS = frozenset({"base64", "base32", "basenc", "uudecode", "xxd", "openssl"})
"""Programs that turn text into other bytes: what they produce must not then be run."""
_COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd"})
_PROJECT_RUNNERS = frozenset(
    {"make", "gmake", "cmake", "ninja", "npm", "npx", "pnpm", "yarn", "bun", "deno", "pytest"}
    | {"py.test", "tox", "nox", "cargo", "go", "rake", "bundle", "gradle", "gradlew", "mvn"}
    | {"mvnw", "just", "task", "invoke", "poetry", "pipenv", "uv", "pip", "pip3", "hatch"}
    | {"pdm", "ant", "sbt", "mix", "composer", "dotnet", "swift", "meson", "bazel", "jest"}
    | {"vitest", "mocha", "tsc", "node-gyp", "pre-commit", "nodemon", "flask", "django-admin"}
)
"""Programs that run the project's own files (a Makefile, conftest.py, package.json)."""
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
_INTERPRETERS: dict[str, Language] = {
    "perl": "perl",
    "ruby": "ruby",
    "node": "node",
    "nodejs": "node",
    "php": "php",
    "lua": "lua",
    "luajit": "lua",
    "awk": "awk",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
    "rscript": "other",
    "r": "other",
    "julia": "other",
    "osascript": "other",
    "pwsh": "other",
    "powershell": "other",
    "tclsh": "other",
    "wish": "other",
}


@dataclass(frozen=True, slots=True)
class _Options:
    """How an interpreter takes code on its command line."""

    code: str = ""
    """Short letters whose value is code (`-c`, `-e`)."""
    values: str = ""
    """Short letters that take some other value (`-W arg`, `-I dir`)."""
    modules: str = ""
    """Short letters naming a module or file to load (`-m`, `-M`, `-r`): run as code."""
    inplace: str = ""
    """The in-place editing letter (`perl -i`): operands become writes."""
    long_code: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    stops: bool = False
    """Code ends the options (`python -c CODE args...`)."""


_OPTIONS: dict[Language, _Options] = {
    "python": _Options("c", "WXQ", "m", stops=True),
    "perl": _Options("eE", "Ix0lCd", "Mm", "i"),
    "ruby": _Options("e", "ICxEKFT0l", "r", "i", long_values=frozenset({"--require"})),
    "node": _Options(
        "ep",
        "",
        "r",
        long_code=frozenset({"--eval", "--print"}),
        long_values=frozenset({"--require", "--import", "--input-type", "--loader"}),
    ),
    "php": _Options("rBRE", "dfcz", "", long_code=frozenset({"--run"})),
    "lua": _Options("e", "l", ""),
    "awk": _Options("", "vF", "f", "", long_values=frozenset({"--assign", "--field-separator"})),
    "other": _Options(
        "ecE", "", "", long_code=frozenset({"--eval", "--print", "-command", "--command"})
    ),
}
_EXEC_OPTIONS: dict[str, tuple[str, ...]] = {
    "tar": (
        "--to-command",
        "--use-compress-program",
        "-I",
        "--checkpoint-action",
        "--info-script",
        "--new-volume-script",
        "-F",
    ),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "zip": ("-TT", "--unzip-command"),
    "git": ("--upload-pack", "--receive-pack", "--exec"),
    "man": ("-P", "--pager", "-H", "--html"),
    "vim": ("-c", "--cmd", "+", "-S"),
    "vi": ("-c", "--cmd", "+", "-S"),
    "nvim": ("-c", "--cmd", "+", "-S"),
    "ex": ("-c", "+", "-S"),
    "gdb": ("-ex", "--eval-command", "-x", "--command"),
    "emacs": ("--eval", "-f", "--funcall", "-l", "--load"),
    "sqlite3": (".shell", ".system", ".once", ".output", ".load", "-cmd"),
    "mysql": ("\\!",),
    "psql": ("\\!",),
}
"""Options (and, for sqlite3/psql, commands) that run another program; GTFOBins lists more,
and the sandbox stays the boundary for what this misses."""
_WRAPPER_VALUES: dict[str, str] = {
    "sudo": "ugphCDrtTU",
    "doas": "uC",
    "env": "uCS",
    "nice": "n",
    "ionice": "cnpPu",
    "timeout": "sk",
    "gtimeout": "sk",
    "stdbuf": "ioe",
    "xargs": "ILnPdEsa",
    "exec": "a",
    "time": "fo",
    "setsid": "",
    "nohup": "",
    "command": "",
    "builtin": "",
    "busybox": "",
    "chrt": "",
    "taskset": "c",
    "flock": "wEc",
    "strace": "oepsuIa",
    "ltrace": "oepsuna",
    "valgrind": "",
    "watch": "nd",
    "script": "cqeEfo",
    "su": "csgG",
    "runuser": "csgGu",
    "sg": "c",
    "fakeroot": "ifs",
    "unbuffer": "",
    "eatmydata": "",
    "nocache": "",
    "catchsegv": "",
    "firejail": "",
    "proot": "rbw",
    "chroot": "",
    "nsenter": "tSGrwm",
    "unshare": "",
    "systemd-run": "upE",
    "caffeinate": "tw",
    "parallel": "jS",
}
"""Programs that run the rest of their words as a command, and their options that take a
value (`sudo -u root`, `timeout -s KILL`)."""
_WRAPPER_CODE = {"env": "S", "flock": "c", "script": "c", "su": "c", "runuser": "c", "sg": "c"}
"""Wrapper options whose value is a whole command line (`env -S 'rm -rf src'`)."""
_WRAPPER_OPERANDS = {"timeout": 1, "gtimeout": 1, "chroot": 1, "chrt": 1, "taskset": 1}
_INTERESTING = SHELLS | frozenset(
    {"rm", "find", "git", "rsync", "eval", "source", "xargs", "sed", "perl", "ruby", "node"}
    | {"php", "awk", "gawk", "base64", "xxd", "tar", "zip", "crontab", "at"}
)
"""Programs looked for at every word, not only at the start: an unknown wrapper
(`chpst rm -rf src`) must not hide them."""
_DISCARDED = ("/tmp", "/dev/shm", "/var/tmp", "/dev/null")
_DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly", "alias"})
_STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_ASSIGNED = re.compile(r"(?<![\w$-])([A-Za-z_][A-Za-z0-9_]*)\+?=")
_ASSIGNING = re.compile(
    r"\b(?:for|select|read|mapfile|readarray|unset|getopts|export|declare|typeset|local"
    r"|readonly|let|printf)\b([^;&|\n)]*)"
)
_DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?=")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\+?)=")


def _assigned_names(text: str) -> collections.Counter[str]:
    """How often each variable may be assigned anywhere in the text, over-counted on
    purpose: a name set twice (a loop, a subshell, `read`) has no single value."""
    counts: collections.Counter[str] = collections.Counter(_ASSIGNED.findall(text))
    counts.update(_DEFAULTED.findall(text))
    for match in _ASSIGNING.finditer(text):
        counts.update(_IDENTIFIER.findall(match.group(1)))
    return counts


@dataclass
class _Call:
    """One program run with its arguments, inside the command that runs it."""

    name: str
    args: list[Word]
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


@dataclass
class _Reader:
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
        while start < len(words) and _assignment(words[start]) is not None:
            start += 1
        if start == len(words):
            for word in words:
                self.assign(word)
            return
        if program_name(words[start]) in _DECLARERS:
            self.declare(words[start:], depth)
            return
        for word in words[:start]:
            found = _assignment(word)
            assert found is not None
            self.env.unknown.add(found[0])  # `n=x cmd`: set for cmd only, not for `$n`
        # Bash expands before it runs: `{rm,-rf,src}` is `rm -rf src`, and `f=-rf; rm $f`
        # passes `-rf`. Words only known at run time stay as they are.
        expanded = [w for word in words[start:] for w in _expanded(word, self.env)]
        self.invoke(expanded, command, depth)
        for index in range(1, len(expanded)):
            if program_name(expanded[index]) in _INTERESTING:
                self.invoke(expanded[index:], command, depth, scanned=True)

    def invoke(
        self, words: Sequence[Word], command: Command, depth: int, *, scanned: bool = False
    ) -> None:
        words, per_input = _unwrap(words, self, depth)
        if not words:
            return
        name = program_name(words[0])
        if name is None or has_live_glob(words[0]):
            if not scanned:
                self.find(COMPUTED)  # `$(echo rm)`, `$cmd`, `/bin/r?`
            return
        call = _Call(name, list(words[1:]), command, depth, per_input)
        if name in ("for", "select"):
            self.loop(call)
            return
        self.programs.append(name)
        if "/" in (words[0].literal() or ""):
            self.run_file(words[0])
        handler = _HANDLERS.get(name) or _handler_for(name)
        handler(self, call)
        if per_input and handler not in (_reads_operands, _text_only):
            # `find | xargs sed -i ...`: its operands arrive on stdin, unseen.
            self.use("write", _UNKNOWN, content=False)
        for option in _EXEC_OPTIONS.get(name, ()):
            if any(_has_option(t, option) for t in call.texts() if t is not None):
                self.find(EXEC_OPTION)

    # ------------------------------------------------------------ variables and cwd

    def assign(self, word: Word) -> None:
        found = _assignment(word)
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
            found = _assignment(word)
            if found is None:
                continue
            if program_name(words[0]) == "alias":
                self.code("shell", Word(found[1]).literal(), depth)
            else:
                self.assign(word)

    def loop(self, call: _Call) -> None:
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

    def change_dir(self, call: _Call) -> None:
        operands = [w for w in call.args if not (w.literal() or "").startswith("-")]
        if call.name == "popd" or self.cwds is None:
            self.cwds = None
            return
        if not operands:
            self.cwds.append(ROOT)
            return
        values = expand(operands[0], self.env)
        if values is None or any(v.glob for v in values):
            self.cwds = None
            return
        # Every directory the command may be in: a `cd` in a subshell does not stick.
        for value in values:
            for base in list(self.cwds):
                self.cwds.append(_join(base, value.text))
        if len(self.cwds) > 16:
            self.cwds = None

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
            self.use("write", _literal_word(path), recursive=True)
        for name in effects.names:
            if name and len(name) < 4096:
                self.use("name", _literal_word(name))

    def stdin_code(self, call: _Call, language: Language | Literal["shell"]) -> None:
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


def _literal_word(text: str) -> Word:
    return Word((Piece("quoted", text),))


_UNKNOWN = Word((Piece("var", "unknown"),))
"""A word the command line does not show at all (operands xargs reads from stdin)."""


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


def _assignment(word: Word) -> tuple[str, tuple[Piece, ...], bool] | None:
    first = word.pieces[0] if word.pieces else None
    if first is None or first.kind != "lit":
        return None
    match = _ASSIGNMENT.match(first.text)
    if match is None:
        return None
    rest = first.text[match.end() :]
    value = ((Piece("lit", rest),) if rest else ()) + word.pieces[1:]
    return match.group(1), value, bool(match.group(2))


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


def _has_option(text: str, option: str) -> bool:
    if option.startswith("--"):
        return text == option or text.startswith(option + "=")
    if option.startswith("-"):
        return text == option or (len(option) == 2 and text.startswith(option) and text[1] != "-")
    if option.startswith("+"):
        return text.startswith(option)
    return option in text  # a command inside an argument (`sqlite3 x.db ".shell id"`)


# ---------------------------------------------------------------- wrappers


def _unwrap(words: Sequence[Word], reader: _Reader, depth: int) -> tuple[list[Word], bool]:
    """Drop keywords and wrappers (`sudo -u root`, `timeout 5`, `xargs -I{}`) before the
    program; wrapper options whose value is a command line are read as code. Also says
    whether the program gets more operands from standard input (xargs, parallel)."""
    rest = list(words)
    per_input = False
    while rest:
        name = program_name(rest[0])
        if name in _KEYWORDS:
            rest = rest[1:]
            continue
        if name not in _WRAPPER_VALUES:
            return rest, per_input
        per_input |= name in ("xargs", "parallel")
        values, code = _WRAPPER_VALUES[name], _WRAPPER_CODE.get(name, "")
        rest = rest[1:]
        if code:
            # `su root -c CODE`: the code option may come after an operand.
            texts = [w.literal() for w in rest]
            for i, text in enumerate(texts[:-1]):
                if text is not None and text[:1] == "-" and text[-1:] in code:
                    reader.code("shell", texts[i + 1], depth)
        rest = _skip_options(rest, values, _WRAPPER_OPERANDS.get(name, 0))
        if name == "watch" and rest:
            # `watch` hands its words to `sh -c`, joined.
            texts = [w.literal() for w in rest]
            reader.code("shell", None if None in texts else " ".join(t or "" for t in texts), depth)
            return [], per_input
    return rest, per_input


def _skip_options(words: list[Word], values: str, operands: int) -> list[Word]:
    """A wrapper's own options (and leading operands, `timeout 5`) before its command."""
    rest = list(words)
    while rest:
        text = rest[0].literal()
        if text is None:
            break
        if text == "--":
            return rest[1:]
        if text.startswith("-") and len(text) > 1:
            rest = rest[1:]
            if len(text) == 2 and text[1] in values and rest:
                rest = rest[1:]
            continue
        if _assignment(rest[0]) is not None:  # `env X=1 cmd`
            rest = rest[1:]
            continue
        if operands:
            operands -= 1
            rest = rest[1:]
            continue
        break
    return rest


# ---------------------------------------------------------------- handlers

Handler = Callable[[_Reader, _Call], None]


def _options_and_operands(call: _Call, values: str = "") -> tuple[list[str], list[Word]]:
    """Split at the first operand; `values` are short options that take the next word."""
    options: list[str] = []
    operands: list[Word] = []
    args = call.args
    i = 0
    while i < len(args):
        text = args[i].literal()
        if text == "--":
            operands.extend(args[i + 1 :])
            break
        if text is not None and text.startswith("-") and len(text) > 1:
            options.append(text)
            if len(text) == 2 and text[1] in values and i + 1 < len(args):
                options.append(args[i + 1].literal() or "")
                i += 1
        else:
            operands.append(args[i])
        i += 1
    return options, operands


def _short(options: list[str], letters: str) -> bool:
    return any(
        o.startswith("-") and not o.startswith("--") and any(c in o[1:] for c in letters)
        for o in options
    )


def _long(options: list[str], *names: str) -> bool:
    """A long option, also abbreviated as GNU getopt allows (`--recu` for `--recursive`)."""
    for option in options:
        if not option.startswith("--") or len(option) < 4:
            continue
        given = option.split("=", 1)[0]
        if any(name.startswith(given) for name in names):
            return True
    return False


def _rm(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call)
    if _short(options, "rR") or _long(options, "--recursive") or _may_hide_options(call):
        reader.find(RECURSIVE_DELETE)
    for word in operands:
        reader.use("write", word, content=False)


def _may_hide_options(call: _Call) -> bool:
    """A word only known at run time may be `-rf` (`rm ${x:--rf} src`), or several words
    (`rm $targets`); with xargs, the operands are not on the command line at all."""
    unknown = [w for w in call.args if w.literal() is None]
    splits = any(p.kind in ("var", "sub") and not p.quoted for w in unknown for p in w.pieces)
    known = [t for t in call.texts() if t is not None and not t.startswith("-")]
    return call.per_input or splits or bool(unknown and known)


def _writes_operands(values: str = "", *, content: bool = False) -> Handler:
    """Programs whose operands are all written (`touch`, `mkdir`; `patch` with content)."""

    def handle(reader: _Reader, call: _Call) -> None:
        for word in _options_and_operands(call, values)[1]:
            reader.use("write", word, content=content)

    return handle


def _reads_operands(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call, "efmABC")
    recursive = call.name in _RECURSIVE_READERS or (
        call.name in ("grep", "egrep", "fgrep", "ls", "du", "diff")
        and (_short(options, "rR") or _long(options, "--recursive", "--dereference-recursive"))
    )
    for word in operands:
        reader.use("read", word, recursive=recursive)


def _names_operands(reader: _Reader, call: _Call) -> None:
    for word in call.args:
        text = word.literal()
        if text is not None and text.startswith("-"):
            if "=" in text:
                reader.use("name", _literal_word(text.split("=", 1)[1]))
            continue
        reader.use("name", word)


def _text_only(reader: _Reader, call: _Call) -> None:
    """Programs whose operands are text, not paths (`echo`, `export X=1`)."""
    if call.name in ("cd", "pushd", "popd"):
        reader.change_dir(call)


def _copy(reader: _Reader, call: _Call) -> None:
    """cp, mv, install, ln: the destination is written; mv and ln also change the sources
    (moved away, or linked to: a later write through the link lands in them)."""
    options, operands = _options_and_operands(call, "tSmog")
    target = next((options[i + 1] for i, o in enumerate(options[:-1]) if o == "-t"), None)
    target = target or next(
        (o.split("=", 1)[1] for o in options if o.startswith("--target-directory=")), None
    )
    sources = operands if target is not None else operands[:-1]
    if target is not None:
        reader.use("write", _literal_word(target))
    elif operands:
        reader.use("write", operands[-1])
    recursive = _short(options, "rRa") or _long(options, "--recursive", "--archive")
    for word in sources:
        if call.name in ("cp", "install"):
            reader.use("read", word, recursive=recursive)
        else:
            # A link to `..` reaches everything under it; a move takes the tree with it.
            reader.use("write", word, recursive=call.name == "ln")
    destination = target or (operands[-1].literal() if operands else None) or ""
    if call.name == "mv" and destination.startswith(_DISCARDED):
        reader.find(RECURSIVE_DELETE)  # the sandbox's /tmp is gone when the call ends


def _dd(reader: _Reader, call: _Call) -> None:
    for word in call.args:
        first = word.pieces[0] if word.pieces else None
        if first is None or first.kind not in ("lit", "quoted") or "=" not in first.text:
            continue
        key, head = first.text.split("=", 1)
        value = Word(((Piece(first.kind, head),) if head else ()) + word.pieces[1:])
        if key == "of":
            reader.use("write", value)
        elif key == "if":
            reader.use("read", value)


def _chmod(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call)
    if not any(o.startswith("--reference") for o in options):
        operands = operands[1:]
    for word in operands:
        # `chmod +x x && ./x` runs what it marked: a write for the written-and-run check.
        reader.use("write", word, content=False)


def _find(reader: _Reader, call: _Call) -> None:
    texts = call.texts()
    start = _find_start(texts)
    if "-delete" in texts:
        reader.find(FIND_DELETE)
    if any(t in ("-exec", "-execdir", "-ok", "-okdir") for t in texts) or None in texts[start:]:
        reader.find(FIND_EXEC)
    for i, text in enumerate(texts):
        if text in ("-fprint", "-fprint0", "-fprintf", "-fls") and i + 1 < len(call.args):
            reader.use("write", call.args[i + 1])
    for word in call.args[:start]:
        if not (word.literal() or "").startswith("-"):
            reader.use("read", word)


def _find_start(texts: list[str | None]) -> int:
    """Where find's expression starts (its paths come first)."""
    for i, text in enumerate(texts):
        if text is None or (text.startswith(("-", "(", "!")) and text not in ("-H", "-L", "-P")):
            return i
    return len(texts)


_GIT_VALUES = frozenset({"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env"})
_GIT_RISKY_KEYS = re.compile(
    r"alias|command|cmd|editor|pager|program|helper|hook|fsmonitor|proxy|textconv|filter|mirror"
    r"|push|exec|askpass|diff\.external|sshcommand|pack|receive|upload|sequence|include",
    re.IGNORECASE,
)


def _git(reader: _Reader, call: _Call) -> None:
    texts = call.texts()
    i = 0
    while i < len(texts):
        text = texts[i]
        if text is None or not text.startswith("-"):
            break
        if text in _GIT_VALUES and i + 1 < len(texts):
            if text in ("-c", "--config-env") and _GIT_RISKY_KEYS.search(texts[i + 1] or "x"):
                reader.find(GIT_CONFIG)
            i += 2
            continue
        if text.startswith(("--config-env=", "-c")) and _GIT_RISKY_KEYS.search(text):
            reader.find(GIT_CONFIG)
        i += 1
    if i >= len(texts):
        return
    sub = texts[i]
    if sub is None:
        reader.find(COMPUTED)
        return
    _git_subcommand(reader, sub.lower(), texts[i + 1 :])


def _git_subcommand(reader: _Reader, sub: str, texts: list[str | None]) -> None:
    rest = [t or "" for t in texts]
    options = [t for t in rest if t.startswith("-")]
    operands = [t for t in rest if not t.startswith("-")]
    discards = (
        (
            (sub in ("checkout", "restore", "switch"))
            and (_short(options, "f") or _long(options, "--force") or "." in operands)
        )
        or (sub == "reset" and _long(options, "--hard", "--merge", "--keep"))
        or (sub == "stash" and operands[:1] in (["drop"], ["clear"]))
    )
    if sub == "push" and (
        _short(options, "fd")
        or _long(options, "--force", "--force-with-lease", "--force-if-includes", "--mirror")
        or _long(options, "--delete", "--prune")
        or any(t.startswith(("+", ":")) for t in operands)
        or None in texts
    ):
        reader.find(GIT_FORCE)
    elif sub == "clean" and not (_short(options, "n") or _long(options, "--dry-run")):
        reader.find(GIT_CLEAN)
    elif discards:
        reader.find(GIT_RESET)
    elif sub == "rm" and _short(options, "r") and "--cached" not in options:
        reader.find(RECURSIVE_DELETE)
    elif sub == "config" and any(_GIT_RISKY_KEYS.search(t) for t in operands[:1]):
        reader.find(GIT_CONFIG)
    # Hooks in .git/hooks run on these: written in the same command, they are a script run.
    reader.ran_project |= sub in ("commit", "merge", "rebase", "am", "push", "checkout")


def _rsync(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call, "eTf")
    if any(o.startswith(("--delete", "--del", "--remove-source")) for o in options):
        reader.find(RECURSIVE_DELETE)
    if operands:
        reader.use("write", operands[-1])
    for word in operands[:-1]:
        reader.use("read", word, recursive=True)


_SED_COMMAND = re.compile(r"(?:^|[;{}\n]|[0-9$/!,~])\s*[ewW](?:\s|$)")


def _sed(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call, "eflE")
    scripts = [options[i + 1] for i, o in enumerate(options[:-1]) if o == "-e"]
    scripts += [o.split("=", 1)[1] for o in options if o.startswith("--expression=")]
    for i, option in enumerate(options[:-1]):
        if option == "-f":
            reader.run_file(_literal_word(options[i + 1]))
    if not scripts and "-f" not in options and operands:
        script = operands[0].literal()
        scripts.append(script if script is not None else "e")
        operands = operands[1:]
    if any(_sed_runs_or_writes(s) for s in scripts):
        reader.find(EXEC_OPTION)
    in_place = _short(options, "i") or _long(options, "--in-place")
    for word in operands:
        reader.use("write" if in_place else "read", word)


def _sed_runs_or_writes(script: str) -> bool:
    """GNU sed's `e` runs a command and `w` writes a file (also as `s///e`, `s///w`)."""
    if _SED_COMMAND.search(script):
        return True
    for match in re.finditer(r"(?:^|[;{}\n\s])s(.)", script):
        delimiter = match.group(1)
        if delimiter.isalnum() or delimiter in "\\\n":
            continue
        parts = re.split(rf"(?<!\\){re.escape(delimiter)}", script[match.end() :], maxsplit=2)
        if len(parts) == 3 and re.match(r"[gpiImM0-9]*[ew]", parts[2]):
            return True
    return False


def _shell(reader: _Reader, call: _Call) -> None:
    args, texts = call.args, call.texts()
    i, code, stdin = 0, False, False
    while i < len(texts):
        text = texts[i]
        if text is None:
            break
        if text == "--":
            i += 1
            break
        if text in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if text[:1] in "-+" and len(text) > 1:
            code |= not text.startswith("--") and "c" in text[1:]
            stdin |= not text.startswith("--") and "s" in text[1:]
            i += 1
            continue
        break
    operands = args[i:]
    if operands and operands[0].literal() is None:
        _maybe_code(reader, call, "shell", operands[1:])  # `bash ${x:--c} 'rm -rf src'`
    if code:
        reader.code("shell", operands[0].literal() if operands else "", call.depth)
    elif operands and not stdin and operands[0].literal() not in _STDIN_NAMES:
        reader.run_file(operands[0])
    else:
        reader.stdin_code(call, "shell")


def _maybe_code(
    reader: _Reader, call: _Call, language: Language | Literal["shell"], words: list[Word]
) -> None:
    """An option only known at run time may be `-c`: read every later word as code too."""
    for word in words:
        text = word.literal()
        if text is not None:
            reader.code(language, text, call.depth)


def _source(reader: _Reader, call: _Call) -> None:
    if call.args and call.args[0].literal() not in _STDIN_NAMES:
        reader.run_file(call.args[0])
    else:
        reader.stdin_code(call, "shell")


def _eval(reader: _Reader, call: _Call) -> None:
    texts = call.texts()
    reader.code("shell", None if None in texts else " ".join(t or "" for t in texts), call.depth)


def _interpreter(language: Language) -> Handler:
    def handle(reader: _Reader, call: _Call) -> None:
        _run_interpreter(reader, call, language, _OPTIONS.get(language, _OPTIONS["other"]))

    return handle


def _run_interpreter(reader: _Reader, call: _Call, language: Language, spec: _Options) -> None:
    texts = call.texts()
    code: list[str | None] = []
    in_place = stdin = False
    i = 0
    while i < len(texts):
        text = texts[i]
        if text is None:
            _maybe_code(reader, call, language, call.args[i + 1 :])
            break
        if text == "-" or not text.startswith("-") or len(text) < 2:
            stdin |= text == "-"
            break
        i += 1
        if text == "--":
            break
        if text.startswith("--") or (language == "other" and len(text) > 2):
            i = _long_interpreter_option(reader, text, texts, i, spec, code)
            continue
        for j, letter in enumerate(text[1:], start=1):
            if letter in spec.code or letter in spec.values or letter in spec.modules:
                value = text[j + 1 :] or None
                if value is None and i < len(texts):
                    value, i = texts[i], i + 1
                if letter in spec.code:
                    code.append(value)
                elif letter in spec.modules:
                    _load_module(reader, language, value)
                break
            if spec.inplace and letter == spec.inplace:
                in_place = True
                break
        if code and spec.stops:
            break
    operands = call.args[i:]
    loaded = any(t is not None and t.startswith("-f") for t in texts[:i])
    if language == "awk" and not code and operands and not loaded:
        code.append(operands[0].literal())
        operands = operands[1:]
    for value in code:
        reader.code(language, value, call.depth)
    if not code and not (language == "awk" and loaded):
        if operands and not stdin and operands[0].literal() not in _STDIN_NAMES:
            reader.run_file(operands[0])
            operands = operands[1:]
        else:
            reader.stdin_code(call, language)
    reader.ran_code = True
    for word in operands:
        reader.use("write" if in_place else "name", word)


def _long_interpreter_option(
    reader: _Reader,
    text: str,
    texts: list[str | None],
    i: int,
    spec: _Options,
    code: list[str | None],
) -> int:
    """`--eval CODE`, `--require=./x.js`, PowerShell's `-Command`; returns the next index."""
    flag = text.split("=", 1)[0].lower()
    value = text.split("=", 1)[1] if "=" in text else None
    if flag in spec.long_code or flag in spec.long_values:
        if value is None and i < len(texts):
            value, i = texts[i], i + 1
        if flag in spec.long_code:
            code.append(value)
        elif flag in ("--require", "--import", "--loader"):
            reader.run_file(_literal_word(value or ""))
    elif flag in ("-encodedcommand", "-enc", "-ec"):
        reader.find(COMPUTED)
    return i


def _load_module(reader: _Reader, language: Language, module: str | None) -> None:
    """`python -m mod`, `perl -MFile::Path`, `node -r ./x.js`: code loaded by name."""
    if module is None:
        reader.find(COMPUTED)
        return
    if language == "python":
        reader.ran_project = True  # `python -m pytest` runs the project's conftest.py
        path = module.replace(".", "/")
        reader.run_file(_literal_word(path + ".py"))
        reader.run_file(_literal_word(path + "/__main__.py"))
    elif language in ("perl", "ruby"):
        reader.code(language, f"use {module}", 0)
    else:
        reader.run_file(_literal_word(module))


def _decoder(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call)
    name = call.name
    if name == "uudecode":
        reader.decoded = True
    elif name in ("base64", "base32", "basenc"):
        reader.decoded |= _short(options, "dD") or _long(options, "--decode")
    elif name == "xxd":
        reader.decoded |= _short(options, "r") or _long(options, "--revert")
        if len(operands) > 1:
            reader.use("write", operands[1])
            operands = operands[:1]
    elif name == "openssl":
        reader.decoded |= "-d" in options or "-base64" in options or "base64" in call.texts()
    for word in operands:
        reader.use("read", word)


def _compressor(reader: _Reader, call: _Call) -> None:
    """gzip and friends replace the files they name."""
    for word in _options_and_operands(call, "S")[1]:
        reader.use("write", word)


def _downloader(reader: _Reader, call: _Call) -> None:
    """curl and wget write files: a named output, or the URL's last component."""
    texts = call.texts()
    named = ("-o", "--output") if call.name == "curl" else ("-O", "--output-document")
    remote = call.name == "wget" or any(t in ("-O", "--remote-name") for t in texts if t)
    for i, text in enumerate(texts):
        if text in named and i + 1 < len(call.args):
            reader.use("write", call.args[i + 1])
            remote = False
        elif text and text.startswith(named[1] + "="):
            reader.use("write", _literal_word(text.split("=", 1)[1]))
            remote = False
    if remote:
        for text in texts:
            if text and re.match(r"^[a-z]+://", text, re.IGNORECASE):
                name = text.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                reader.use("write", _literal_word(name or "index.html"))


def _archive(reader: _Reader, call: _Call) -> None:
    texts = call.texts()
    for i, text in enumerate(texts):
        if text in ("-f", "--file") and i + 1 < len(call.args):
            reader.use("write", call.args[i + 1])
        elif text and text.startswith("--file="):
            reader.use("write", _literal_word(text.split("=", 1)[1]))
    operands = _options_and_operands(call, "bntfCT")[1]
    if call.name == "zip" and operands:
        reader.use("write", operands[0])
        operands = operands[1:]
    for word in operands:
        reader.use("read", word, recursive=True)


def _project(reader: _Reader, call: _Call) -> None:
    reader.ran_project = reader.ran_code = True
    fed = call.command.piped or any(r.op in ("<<", "<<-", "<<<") for r in call.command.redirects)
    if fed and any(t in _STDIN_NAMES or t in ("-f", "--file") for t in call.texts() if t):
        reader.find(PIPE_EXEC)  # `make -f - <<EOF`: a build file that is never on disk
    _names_operands(reader, call)


def _schedule(reader: _Reader, call: _Call) -> None:
    if call.name == "crontab" and call.texts() == ["-l"]:
        return
    reader.find(SCHEDULE)


def _sort(reader: _Reader, call: _Call) -> None:
    options, operands = _options_and_operands(call, "otkST")
    for i, option in enumerate(options[:-1]):
        if option == "-o":
            reader.use("write", _literal_word(options[i + 1]))
    for word in operands:
        reader.use("read", word)


_HANDLERS: dict[str, Handler] = {
    "rm": _rm,
    "rmdir": _writes_operands("p"),
    "unlink": _writes_operands(),
    "shred": _writes_operands("nsu"),
    "truncate": _writes_operands("sr"),
    "touch": _writes_operands("rdt"),
    "mkdir": _writes_operands("m"),
    "mkfifo": _writes_operands("m"),
    "mknod": _writes_operands("m"),
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    "cp": _copy,
    "mv": _copy,
    "install": _copy,
    "ln": _copy,
    "tee": _writes_operands(content=True),
    "dd": _dd,
    "find": _find,
    "git": _git,
    "rsync": _rsync,
    "sed": _sed,
    "source": _source,
    ".": _source,
    "eval": _eval,
    "curl": _downloader,
    "wget": _downloader,
    "tar": _archive,
    "zip": _archive,
    "crontab": _schedule,
    "at": _schedule,
    "batch": _schedule,
    "sort": _sort,
    "patch": _writes_operands("ioprdBDFVYzg", content=True),
}


def _handler_for(name: str) -> Handler:
    if name in SHELLS:
        return _shell
    if _PYTHON.match(name):
        return _interpreter("python")
    if name in _INTERPRETERS:
        return _interpreter(_INTERPRETERS[name])
    if name in _DECODERS:
        return _decoder
    if name in _COMPRESSORS:
        return _compressor
    if name in _TEXT_PROGRAMS:
        return _text_only
    if name in _READERS:
        return _reads_operands
    if name in _PROJECT_RUNNERS:
        return _project
    return _names_operands


@functools.lru_cache(maxsize=256)
def assess(command: str) -> Effects:
    """Everything the guard can tell about what `command` does (pure: text in, effects out)."""
    reader = _Reader(counts=_assigned_names(command))
    reader.script(command, 0)
    return reader.conclude()
