"""What each program does with its words: the guard's knowledge of rm, find, git, sed,
shells, interpreters and the rest (the wrappers that run them are `wrappers.py`'s).

A handler reads one program's options and operands and tells the reader (`effects.py`)
what they do: findings that make the guard ask, and the paths written, read, run or named.
Options are read as the program's own parser would, in any order and GNU abbreviation
(`rm -r -f`, `--recu`, `git -c a=b push --force`); a program the guard does not know
still has its operands judged as paths that may be written.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from app.security.shell.findings import (
    COMPUTED,
    EXEC_OPTION,
    FIND_DELETE,
    FIND_EXEC,
    GIT_CLEAN,
    GIT_CONFIG,
    GIT_FORCE,
    GIT_RESET,
    PIPE_EXEC,
    RECURSIVE_DELETE,
    SCHEDULE,
    Call,
    Finding,
    Role,
    literal_word,
)
from app.security.shell.interpreters import Language
from app.security.shell.syntax import Piece, Word


class Reader(Protocol):
    """The reader (`effects.py`'s `Reader`) as a handler sees it: what a handler may tell
    it. Declared here, by shape, because the reader calls the handlers: importing it back
    would tie the two modules in a circle."""

    decoded: bool
    ran_code: bool
    ran_project: bool

    def find(self, finding: Finding) -> None: ...
    def use(
        self, role: Role, word: Word, *, content: bool = True, recursive: bool = False
    ) -> None: ...
    def run_file(self, word: Word) -> None: ...
    def code(self, language: Language | Literal["shell"], text: str | None, depth: int) -> None: ...
    def stdin_code(self, call: Call, language: Language | Literal["shell"]) -> None: ...
    def change_dir(self, call: Call) -> None: ...


SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "fish", "rbash"})
_PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*$")
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
    "rg": ("--pre",),
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
INTERESTING = SHELLS | frozenset(
    {"rm", "find", "git", "rsync", "eval", "source", "xargs", "sed", "perl", "ruby", "node"}
    | {"php", "awk", "gawk", "base64", "xxd", "tar", "zip", "crontab", "at"}
)
"""Programs looked for at every word, not only at the start: an unknown wrapper
(`chpst rm -rf src`) must not hide them."""
_DISCARDED = ("/tmp", "/dev/shm", "/var/tmp", "/dev/null")
DECLARERS = frozenset({"export", "declare", "typeset", "local", "readonly", "alias"})
_STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
UNKNOWN = Word((Piece("sub", "stdin"),))
"""A word the command line does not show at all (operands xargs reads from stdin): a
substitution, which no assignment in the command can give a value."""


def _has_option(text: str, option: str) -> bool:
    if option.startswith("--"):
        return text == option or text.startswith(option + "=")
    if option.startswith("-"):
        return text == option or (len(option) == 2 and text.startswith(option) and text[1] != "-")
    if option.startswith("+"):
        return text.startswith(option)
    return option in text  # a command inside an argument (`sqlite3 x.db ".shell id"`)


# ---------------------------------------------------------------- handlers

Handler = Callable[[Reader, Call], None]


def _options_and_operands(call: Call, values: str = "") -> tuple[list[str], list[Word]]:
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


def _rm(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call)
    if _short(options, "rR") or _long(options, "--recursive") or _may_hide_options(call):
        reader.find(RECURSIVE_DELETE)
    for word in operands:
        reader.use("write", word, content=False)


def _may_hide_options(call: Call) -> bool:
    """A word only known at run time may be `-rf` (`rm ${x:--rf} src`), or several words
    (`rm $targets`); with xargs, the operands are not on the command line at all."""
    unknown = [w for w in call.args if w.literal() is None]
    splits = any(p.kind in ("var", "sub") and not p.quoted for w in unknown for p in w.pieces)
    known = [t for t in call.texts() if t is not None and not t.startswith("-")]
    return call.per_input or splits or bool(unknown and known)


def _writes_operands(values: str = "", *, content: bool = False) -> Handler:
    """Programs whose operands are all written (`touch`, `mkdir`; `patch` with content)."""

    def handle(reader: Reader, call: Call) -> None:
        for word in _options_and_operands(call, values)[1]:
            reader.use("write", word, content=content)

    return handle


def _reads_operands(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call, "efmABC")
    recursive = call.name in _RECURSIVE_READERS or (
        call.name in ("grep", "egrep", "fgrep", "ls", "du", "diff")
        and (_short(options, "rR") or _long(options, "--recursive", "--dereference-recursive"))
    )
    for word in operands:
        reader.use("read", word, recursive=recursive)


def _names_operands(reader: Reader, call: Call) -> None:
    for word in call.args:
        text = word.literal()
        if text is not None and text.startswith("-"):
            if "=" in text:
                reader.use("name", literal_word(text.split("=", 1)[1]))
            continue
        reader.use("name", word)


def _text_only(reader: Reader, call: Call) -> None:
    """Programs whose operands are text, not paths (`echo`, `export X=1`)."""
    if call.name in ("cd", "pushd", "popd"):
        reader.change_dir(call)


def _copy(reader: Reader, call: Call) -> None:
    """cp, mv, install, ln: the destination is written; mv and ln also change the sources
    (moved away, or linked to: a later write through the link lands in them)."""
    options, operands = _options_and_operands(call, "tSmog")
    target = next((options[i + 1] for i, o in enumerate(options[:-1]) if o == "-t"), None)
    target = target or next(
        (o.split("=", 1)[1] for o in options if o.startswith("--target-directory=")), None
    )
    sources = operands if target is not None else operands[:-1]
    if target is not None:
        reader.use("write", literal_word(target))
    elif operands:
        reader.use("write", operands[-1])
    recursive = _short(options, "rRa") or _long(options, "--recursive", "--archive")
    # `cp -l`/`-s` links instead of copying: a later write through the link lands in the
    # source, as with ln.
    links = call.name == "ln" or (
        call.name == "cp" and (_short(options, "ls") or _long(options, "--link", "--symbolic-link"))
    )
    for word in sources:
        if call.name in ("cp", "install") and not links:
            reader.use("read", word, recursive=recursive)
        else:
            # A link to `..` reaches everything under it; a move takes the tree with it.
            reader.use("write", word, recursive=links)
    destination = target or (operands[-1].literal() if operands else None) or ""
    if call.name == "mv" and destination.startswith(_DISCARDED):
        reader.find(RECURSIVE_DELETE)  # the sandbox's /tmp is gone when the call ends


def _dd(reader: Reader, call: Call) -> None:
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


def _chmod(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call)
    if not any(o.startswith("--reference") for o in options):
        operands = operands[1:]
    for word in operands:
        # `chmod +x x && ./x` runs what it marked: a write for the written-and-run check.
        reader.use("write", word, content=False)


def _find(reader: Reader, call: Call) -> None:
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


def _git(reader: Reader, call: Call) -> None:
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


def _git_subcommand(reader: Reader, sub: str, texts: list[str | None]) -> None:
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


def _rsync(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call, "eTf")
    if any(o.startswith(("--delete", "--del", "--remove-source")) for o in options):
        reader.find(RECURSIVE_DELETE)
    if operands:
        reader.use("write", operands[-1])
    for word in operands[:-1]:
        reader.use("read", word, recursive=True)


_SED_COMMAND = re.compile(r"(?:^|[;{}\n]|[0-9$/!,~])\s*[ewW](?:\s|$)")


def _sed(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call, "eflE")
    scripts = [options[i + 1] for i, o in enumerate(options[:-1]) if o == "-e"]
    scripts += [o.split("=", 1)[1] for o in options if o.startswith("--expression=")]
    for i, option in enumerate(options[:-1]):
        if option == "-f":
            reader.run_file(literal_word(options[i + 1]))
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


def _shell(reader: Reader, call: Call) -> None:
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
    reader: Reader, call: Call, language: Language | Literal["shell"], words: Sequence[Word]
) -> None:
    """An option only known at run time may be `-c`: read every later word as code too."""
    for word in words:
        text = word.literal()
        if text is not None:
            reader.code(language, text, call.depth)


def _source(reader: Reader, call: Call) -> None:
    if call.args and call.args[0].literal() not in _STDIN_NAMES:
        reader.run_file(call.args[0])
    else:
        reader.stdin_code(call, "shell")


def _eval(reader: Reader, call: Call) -> None:
    texts = call.texts()
    reader.code("shell", None if None in texts else " ".join(t or "" for t in texts), call.depth)


def _interpreter(language: Language) -> Handler:
    def handle(reader: Reader, call: Call) -> None:
        _run_interpreter(reader, call, language, _OPTIONS.get(language, _OPTIONS["other"]))

    return handle


def _run_interpreter(reader: Reader, call: Call, language: Language, spec: _Options) -> None:
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
    reader: Reader,
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
            reader.run_file(literal_word(value or ""))
    elif flag in ("-encodedcommand", "-enc", "-ec"):
        reader.find(COMPUTED)
    return i


def _load_module(reader: Reader, language: Language, module: str | None) -> None:
    """`python -m mod`, `perl -MFile::Path`, `node -r ./x.js`: code loaded by name."""
    if module is None:
        reader.find(COMPUTED)
        return
    if language == "python":
        reader.ran_project = True  # `python -m pytest` runs the project's conftest.py
        path = module.replace(".", "/")
        reader.run_file(literal_word(path + ".py"))
        reader.run_file(literal_word(path + "/__main__.py"))
    elif language in ("perl", "ruby"):
        reader.code(language, f"use {module}", 0)
    else:
        reader.run_file(literal_word(module))


def _decoder(reader: Reader, call: Call) -> None:
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


def _compressor(reader: Reader, call: Call) -> None:
    """gzip and friends replace the files they name."""
    for word in _options_and_operands(call, "S")[1]:
        reader.use("write", word)


def _downloader(reader: Reader, call: Call) -> None:
    """curl and wget write files: a named output, or the URL's last component."""
    texts = call.texts()
    named = ("-o", "--output") if call.name == "curl" else ("-O", "--output-document")
    remote = call.name == "wget" or any(t in ("-O", "--remote-name") for t in texts if t)
    for i, text in enumerate(texts):
        if text in named and i + 1 < len(call.args):
            reader.use("write", call.args[i + 1])
            remote = False
        elif text and text.startswith(named[1] + "="):
            reader.use("write", literal_word(text.split("=", 1)[1]))
            remote = False
    if remote:
        for text in texts:
            if text and re.match(r"^[a-z]+://", text, re.IGNORECASE):
                name = text.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
                reader.use("write", literal_word(name or "index.html"))


def _archive(reader: Reader, call: Call) -> None:
    texts = call.texts()
    for i, text in enumerate(texts):
        if text in ("-f", "--file") and i + 1 < len(call.args):
            reader.use("write", call.args[i + 1])
        elif text and text.startswith("--file="):
            reader.use("write", literal_word(text.split("=", 1)[1]))
    operands = _options_and_operands(call, "bntfCT")[1]
    if call.name == "zip" and operands:
        reader.use("write", operands[0])
        operands = operands[1:]
    for word in operands:
        reader.use("read", word, recursive=True)


def _project(reader: Reader, call: Call) -> None:
    reader.ran_project = reader.ran_code = True
    fed = call.command.piped or any(r.op in ("<<", "<<-", "<<<") for r in call.command.redirects)
    if fed and any(t in _STDIN_NAMES or t in ("-f", "--file") for t in call.texts() if t):
        reader.find(PIPE_EXEC)  # `make -f - <<EOF`: a build file that is never on disk
    _names_operands(reader, call)


def _schedule(reader: Reader, call: Call) -> None:
    if call.name == "crontab" and call.texts() == ["-l"]:
        return
    reader.find(SCHEDULE)


def _sort(reader: Reader, call: Call) -> None:
    options, operands = _options_and_operands(call, "otkST")
    for i, option in enumerate(options[:-1]):
        if option == "-o":
            reader.use("write", literal_word(options[i + 1]))
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


def run(reader: Reader, call: Call) -> None:
    """What `call` does, told to the reader."""
    handler = _HANDLERS.get(call.name) or _handler_for(call.name)
    handler(reader, call)
    if call.per_input and handler not in (_reads_operands, _text_only):
        # `find | xargs sed -i ...`: its operands arrive on stdin, unseen.
        reader.use("write", UNKNOWN, content=False)
    for option in _EXEC_OPTIONS.get(call.name, ()):
        if any(_has_option(t, option) for t in call.texts() if t is not None):
            reader.find(EXEC_OPTION)
