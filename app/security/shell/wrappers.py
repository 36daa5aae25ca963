"""Wrappers: programs that run the rest of their words as a command (`sudo -u root`,
`timeout 5`, `xargs -I{}`, `env -S '...'`), and how the guard sees past them.

The reader (`effects.py`) unwraps every command before it looks the program up in
`programs.py`, so a wrapper can never hide what it runs; a wrapper option whose value is a
whole command line is read as code.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.security.shell.findings import assignment, program_name
from app.security.shell.programs import Reader
from app.security.shell.syntax import Word

_KEYWORDS = frozenset(
    {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"}
    | {"coproc", "function", "case", "esac", "in", "((", "))"}
)
"""Words that may stand before the program and are none (`if`, `!`, `{`)."""
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


def unwrap(words: Sequence[Word], reader: Reader, depth: int) -> tuple[list[Word], bool]:
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
        if assignment(rest[0]) is not None:  # `env X=1 cmd`
            rest = rest[1:]
            continue
        if operands:
            operands -= 1
            rest = rest[1:]
            continue
        break
    return rest
