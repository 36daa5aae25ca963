"""What an interpreter one-liner does: `python3 -c`, `perl -e`, `node -e`, a heredoc to `python3 -`.

A shell pattern cannot see inside `python3 -c "import shutil; shutil.rmtree('src')"`, and
the same effect has endless spellings (`__import__('shu'+'til')`, `getattr(os, 'sys'+'tem')`).
So the guard reads the code. Python it parses (`ast`), and asks when the code deletes,
starts processes, builds code or names at run time (`eval`, `getattr`, `__import__`, ...),
or opens a path that is not written out as a literal; literal paths are handed back so the
path checks can see `open('AGENTS.md', 'w')`. Other languages it cannot parse here, so it
asks on any sign of those effects, spelled or hidden (escapes, `pack`, `fromCharCode`): when
the source is obfuscated, asking is the safe answer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Literal

from app.security.shell.syntax import fold

Language = Literal["python", "perl", "ruby", "node", "php", "lua", "awk", "other"]

DELETES = "deletes files"
SPAWNS = "starts processes or shells"
DYNAMIC = "builds code or names at run time"
COMPUTED_PATH = "opens a path computed at run time"
WRITES = "writes, moves or links files"
UNPARSED = "could not be read as Python"


@dataclass(frozen=True, slots=True)
class CodeEffects:
    reasons: tuple[str, ...] = ()
    """Why a human should look; empty when the code does none of it."""
    writes: tuple[str, ...] = ()
    """Literal paths the code writes (Python only)."""
    names: tuple[str, ...] = ()
    """Every string literal in the code: any of them may be a path it touches."""


# ---------------------------------------------------------------- Python

_PY_DELETE = frozenset({"rmtree", "remove", "unlink", "rmdir", "removedirs"})
_PY_SPAWN = frozenset(
    {"system", "popen", "fork", "forkpty", "startfile", "posix_spawn", "posix_spawnp"}
    | {"create_subprocess_exec", "create_subprocess_shell", "getoutput", "getstatusoutput"}
    | {"check_output", "check_call", "Popen", "execl", "execle", "execlp", "execlpe"}
    | {"execv", "execve", "execvp", "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"}
    | {"spawnv", "spawnve", "spawnvp", "spawnvpe", "kill", "killpg"}
)
_PY_DYNAMIC = frozenset(
    {"eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "globals"}
    | {"locals", "vars", "breakpoint", "__builtins__", "__builtin__", "__dict__", "__class__"}
    | {"__subclasses__", "__globals__", "__getattribute__", "__code__", "__loader__"}
    | {"__spec__", "__bases__", "__mro__", "__self__", "__func__", "__closure__"}
    | {"import_module", "exec_module", "load_module", "reload", "run_path", "run_module"}
    | {"methodcaller", "attrgetter"}
)
_PY_MODULES = frozenset(
    {"subprocess", "pty", "ctypes", "_ctypes", "cffi", "runpy", "code", "codeop", "marshal"}
    | {"pickle", "_pickle", "cPickle", "shelve", "dill", "commands", "popen2", "posix", "nt"}
    | {"_posixsubprocess", "multiprocessing", "builtins", "__builtin__", "imp", "zipimport"}
    | {"pdb", "webbrowser", "_io", "_thread", "sysconfig", "platform"}
)
"""Importing one of these is enough: each can start a process or run serialised code."""
_PY_OPENERS = frozenset({"open", "fdopen"})
_PY_READERS = frozenset({"read_text", "read_bytes", "loadtxt", "connect", "ZipFile", "TarFile"})
_PY_PATH_WRITERS = frozenset(
    {"write_text", "write_bytes", "touch", "mkdir", "makedirs", "chmod", "lchmod", "chown"}
    | {"lchown", "mkfifo", "mknod", "utime", "truncate", "symlink_to", "hardlink_to"}
    | {"rename", "renames", "symlink", "link", "link_to", "copyfile", "copy2", "copytree"}
    | {"copymode", "copystat", "move", "extractall", "extract", "savetxt", "save"}
)
_PY_WRITERS_OF = {"os": frozenset({"replace"}), "shutil": frozenset({"copy"})}
"""Names too common elsewhere (`str.replace`, `dict.copy`) count only on these modules."""
_PY_TWO_PATHS = frozenset(
    {"rename", "renames", "replace", "symlink", "link", "copyfile", "copy", "copy2", "copytree"}
    | {"copymode", "copystat", "move"}
)
_PATH_TYPES = frozenset({"Path", "PurePath", "PosixPath", "PurePosixPath"})
_MODULES = frozenset(
    {"os", "shutil", "pathlib", "io", "codecs", "posix", "tarfile", "zipfile", "gzip", "bz2"}
    | {"lzma", "sqlite3", "np", "numpy", "json", "csv"}
)


def _literal(node: ast.expr | None) -> str | None:
    """The path an expression spells out literally, or None when it is computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        value = node.value
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    if isinstance(node, ast.Call) and _callee(node)[0] in _PATH_TYPES and not node.keywords:
        parts = [_literal(a) for a in node.args]
        return None if None in parts else "/".join(p for p in parts if p is not None)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _literal(node.left), _literal(node.right)
        return f"{left}/{right}" if left is not None and right is not None else None
    return None


def _callee(call: ast.Call) -> tuple[str, ast.expr | None]:
    """The called name and what it is called on (`os.remove` -> ("remove", os))."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id, None
    if isinstance(func, ast.Attribute):
        return func.attr, func.value
    return "", None


def _receiver_name(node: ast.expr | None) -> str:
    return node.id if isinstance(node, ast.Name) else ""


def _on_module(receiver: ast.expr | None) -> bool:
    """`open(...)`, `os.rename(...)`: the paths are arguments. Otherwise (`p.write_text()`,
    `Path(x).open()`) the object called on is the path."""
    return receiver is None or _receiver_name(receiver) in _MODULES


def _mode_writes(mode: ast.expr | None) -> bool:
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True  # a mode computed at run time


class _PythonReader(ast.NodeVisitor):
    def __init__(self) -> None:
        self.reasons: set[str] = set()
        self.writes: list[str] = []
        self.names: list[str] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._module(node.module or "")
        for alias in node.names:
            self._identifier(alias.name)

    def visit_Name(self, node: ast.Name) -> None:
        self._identifier(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._identifier(node.attr)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self.names.append(node.value)

    def visit_Call(self, node: ast.Call) -> None:
        name, receiver = _callee(node)
        if name in _PY_OPENERS:
            self._opened(node, receiver)
        elif name in _PY_PATH_WRITERS or name in _PY_WRITERS_OF.get(_receiver_name(receiver), ()):
            self._paths(node, receiver, write=True)
        elif name in _PY_READERS:
            self._paths(node, receiver, write=False)
        self.generic_visit(node)

    def _module(self, name: str) -> None:
        root = name.split(".")[0]
        if root == "importlib":
            self.reasons.add(DYNAMIC)
        elif root in _PY_MODULES:
            self.reasons.add(SPAWNS)

    def _identifier(self, name: str) -> None:
        if name in _PY_DELETE:
            self.reasons.add(DELETES)
        elif name in _PY_SPAWN:
            self.reasons.add(SPAWNS)
        elif name in _PY_DYNAMIC:
            self.reasons.add(DYNAMIC)

    def _opened(self, call: ast.Call, receiver: ast.expr | None) -> None:
        """`open(path, mode)`, `os.open(path, flags)`, `Path(...).open(mode)`."""
        module = _on_module(receiver)
        target = (call.args[0] if call.args else None) if module else receiver
        mode_at = 1 if module else 0
        mode = call.args[mode_at] if len(call.args) > mode_at else None
        for keyword in call.keywords:
            if keyword.arg == "file":
                target = keyword.value
            elif keyword.arg in ("mode", "flags"):
                mode = keyword.value
        self._target(target, write=_mode_writes(mode) or _receiver_name(receiver) == "os")

    def _paths(self, call: ast.Call, receiver: ast.expr | None, *, write: bool) -> None:
        count = 2 if _callee(call)[0] in _PY_TWO_PATHS else 1
        if _on_module(receiver):
            targets: list[ast.expr | None] = list(call.args[:count]) or [None]
        else:
            targets = [receiver, *call.args[: count - 1]]
        for target in targets:
            self._target(target, write=write)

    def _target(self, node: ast.expr | None, *, write: bool) -> None:
        path = _literal(node)
        if path is None:
            self.reasons.add(COMPUTED_PATH)
        elif write:
            self.writes.append(path)


def _python(code: str) -> CodeEffects:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        text = _text(code, "other")
        return CodeEffects(tuple(sorted({*text.reasons, UNPARSED})), (), text.names)
    reader = _PythonReader()
    try:
        reader.visit(tree)
    except RecursionError:  # parsed, but too deep to walk: unread code asks
        return CodeEffects((UNPARSED,))
    return CodeEffects(tuple(sorted(reader.reasons)), tuple(reader.writes), tuple(reader.names))


# ---------------------------------------------------------------- other languages

_SPAWN_TEXT = re.compile(
    r"\b(?:system|exec\w*|spawn\w*|popen\w*|fork|qx|shell_exec|passthru|proc_open|pcntl_\w+"
    r"|child_process|os\.execute|open3|process\.binding|deno\.(?:run|command)|bun\.spawn"
    r"|start-process|invoke-expression|iex|do\s+shell\s+script|syscall|kill)\b"
    r"|\bopen\s*\(?[^;)]{0,200}\|",
    re.IGNORECASE,
)
_BACKTICK_SPAWNS = frozenset({"perl", "ruby", "php", "other"})
_DELETE_TEXT = re.compile(
    r"\b(?:unlink\w*|rmdir\w*|rmtree|remove_tree|rm_rf|rm_r|rm_f|rmsync|rimraf|rm|remove\w*"
    r"|delete|erase)\b",
    re.IGNORECASE,
)
_DYNAMIC_TEXT = re.compile(
    r"\b(?:eval\w*|require|import|load\w*|dofile|instance_eval|class_eval|module_eval|send"
    r"|__send__|public_send|const_get|method|pack|unpack|chr|fromcharcode|atob|decode\w*"
    r"|function|vm|globalthis|global|reflect|constructor|getattr|sprintf|base64|buffer)\b"
    r"|\\x[0-9a-f]{2}|\\u\{?[0-9a-f]{2,}|\\[0-7]{3}|%[0-9a-f]{2}"
    # Names built from pieces or called through a variable: `"sys"."tem"`, `&$f`, `$f()`,
    # `obj['ex'+'ec']`.
    r"|['\"]\s*(?:\.\.?|\+)\s*['\"]|&\s*[$\\{]|\$\w+\s*\(|\[\s*['\"`]|->\s*\(",
    re.IGNORECASE,
)
_WRITE_TEXT = re.compile(
    r"\b(?:open|sysopen|fopen|file_put_contents|fwrite|fputs|writefile\w*|appendfile\w*"
    r"|createwritestream|rename\w*|symlink\w*|link\w*|copy\w*|move|mkdir\w*|chmod\w*"
    r"|chown\w*|truncate\w*|touch|fileutils|file\.new|io\.output|tee)\b"
    r"|(?<!stdout\.)(?<!stderr\.)\bwrite\w*\b",
    re.IGNORECASE,
)
_AWK_SPAWNS = re.compile(r"\bsystem\s*\(|\|\s*getline|\|\s*\"|\"\s*\||\|&")
_AWK_WRITES = re.compile(r"\bprintf?\b[^;{}]{0,200}?>")
_STRINGS = re.compile(r"'([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\"")


def _text(code: str, language: Language) -> CodeEffects:
    reasons: set[str] = set()
    if language == "awk":
        if _AWK_SPAWNS.search(code):
            reasons.add(SPAWNS)
        if _AWK_WRITES.search(code):
            reasons.add(WRITES)
    else:
        if _SPAWN_TEXT.search(code) or ("`" in code and language in _BACKTICK_SPAWNS):
            reasons.add(SPAWNS)
        if language == "ruby" and re.search(r"%x|\bIO\.|\bKernel\b|\bProcess\b", code):
            reasons.add(SPAWNS)
        if _DELETE_TEXT.search(code):
            reasons.add(DELETES)
        if _DYNAMIC_TEXT.search(code):
            reasons.add(DYNAMIC)
        if _WRITE_TEXT.search(code):
            reasons.add(WRITES)
    names = tuple(a or b for a, b in _STRINGS.findall(code))
    return CodeEffects(tuple(sorted(reasons)), (), names)


def code_effects(language: Language, code: str) -> CodeEffects:
    """What the code does, as far as the guard can tell without running it."""
    code = fold(code)
    return _python(code) if language == "python" else _text(code, language)
