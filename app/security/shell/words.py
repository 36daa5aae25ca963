"""What a word of a shell command stands for once bash has expanded it.

Braces are expanded (`{AGENTS,x}.md` names `AGENTS.md`), variables are resolved from the
assignments the same command makes (`n=COURIER; ... $n.md` names `COURIER.md`), unquoted
values are split, and glob characters stay live where bash would expand them. A word whose
value depends on anything the command line does not say (a variable set elsewhere, a
command substitution) has no value here: `expand` returns None, and the guard treats a
write to such a word as a write to anything.
"""

from __future__ import annotations

import collections
import itertools
import re
from dataclasses import dataclass, field

from app.security.shell.syntax import ROOT, Piece, Word, fold

MAX_EXPANSIONS = 64
"""More alternatives than this (`{a..z}{a..z}`) are not enumerated: the word is unknown."""
_GLOB = frozenset("*?[")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RANGE = re.compile(r"^(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?$")


@dataclass(frozen=True, slots=True)
class Value:
    """One value a word can take: its text, and a glob pattern where it has live globs."""

    text: str
    pattern: str
    """`text` with quoted glob characters escaped (`[*]`), for fnmatch."""
    glob: bool

    def word(self) -> Word:
        """The value as a word again, whose expansion gives the value back: only its live
        glob characters stay live (braces and `$` in it are text by now)."""
        if not self.glob:
            return Word((Piece("quoted", self.text),))
        pieces: list[Piece] = []
        i = 0
        while i < len(self.pattern):
            escaped = self.pattern[i : i + 3]
            if escaped in ("[*]", "[?]", "[[]"):
                pieces.append(Piece("quoted", escaped[1]))
                i += 3
                continue
            char = self.pattern[i]
            pieces.append(Piece("lit" if char in _GLOB else "quoted", char))
            i += 1
        return Word(tuple(pieces))


@dataclass(frozen=True, slots=True)
class Binding:
    values: tuple[Value, ...]
    """What the variable may hold; a `for` list gives several."""


@dataclass
class Env:
    """Variables whose value the command line itself fixes, in the order it sets them."""

    bound: dict[str, Binding] = field(default_factory=dict)
    unknown: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> Binding | None:
        if name in self.unknown:
            return None
        return self.bound.get(name)


_Char = tuple[str, bool]
"""A character of a value, and whether glob characters in it are live."""


def expand(word: Word, env: Env) -> list[Value] | None:
    """Every value the word can take, or None when one depends on something unknown."""
    alternatives = _braces(list(word.pieces))
    if alternatives is None:
        return None
    values: list[Value] = []
    for pieces in alternatives:
        fields = _substitute(pieces, env)
        if fields is None:
            return None
        values.extend(_value(chars) for chars in fields if chars)
        if len(values) > MAX_EXPANSIONS:
            return None
    return values


def _value(chars: list[_Char]) -> Value:
    text = fold("".join(c for c, _ in chars))
    if not any(c in _GLOB for c, _ in chars):
        return Value(text, text, False)
    pattern = "".join(fold(c) if live or c not in _GLOB else f"[{c}]" for c, live in chars)
    return Value(text, pattern, _globs(chars))


def _globs(chars: list[_Char]) -> bool:
    """Live `*` or `?`, or a live `[` that a `]` closes (`[ -f x ]` is no pattern)."""
    for i, (char, live) in enumerate(chars):
        if live and (char in "*?" or (char == "[" and any(c == "]" for c, _ in chars[i + 2 :]))):
            return True
    return False


def has_live_glob(word: Word) -> bool:
    chars = [
        (c, p.kind == "lit") for p in word.pieces if p.kind in ("lit", "quoted") for c in p.text
    ]
    return _globs(chars)


def _substitute(pieces: list[Piece], env: Env) -> list[list[_Char]] | None:
    """Replace variables by their values; unquoted values split into several fields."""
    results: list[list[list[_Char]]] = [[[]]]
    for piece in pieces:
        if piece.kind == "sub":
            return None
        if piece.kind in ("lit", "quoted"):
            live = piece.kind == "lit"
            for fields in results:
                fields[-1].extend((c, live) for c in piece.text)
            continue
        binding = env.lookup(piece.text)
        if binding is None:
            return None
        grown: list[list[list[_Char]]] = []
        for fields, value in itertools.product(results, binding.values):
            copy = [list(f) for f in fields]
            _append_value(copy, value, quoted=piece.quoted)
            grown.append(copy)
        if len(grown) > MAX_EXPANSIONS:
            return None
        results = grown
    return [f for fields in results for f in fields]


def _append_value(fields: list[list[_Char]], value: Value, *, quoted: bool) -> None:
    if quoted:
        # A value that came from a glob (`for f in *.md`) names matches even when quoted.
        fields[-1].extend((c, value.glob) for c in value.text)
        return
    parts = value.text.split()
    if not parts:
        if value.text:
            fields.append([])  # `rm${IFS}-rf`: blanks alone still split the word
        return
    if value.text[:1].isspace():
        fields.append([])
    for i, part in enumerate(parts):
        if i:
            fields.append([])
        fields[-1].extend((c, True) for c in part)
    if value.text[-1:].isspace():
        fields.append([])


class _TooMany(Exception):
    pass


def _braces(pieces: list[Piece]) -> list[list[Piece]] | None:
    """Bash's brace expansion over the unquoted text of the word (it runs first)."""
    if not any(p.kind == "lit" and "{" in p.text for p in pieces):
        return [pieces]
    flat: list[Piece] = []
    for piece in pieces:
        if piece.kind == "lit":
            flat.extend(Piece("lit", c) for c in piece.text)
        else:
            flat.append(piece)
    out: list[list[Piece]] = []
    pending = collections.deque([flat])  # first in, first out: bash's order of the words
    try:
        while pending:
            current = pending.popleft()
            split = _first_brace(current)
            if split is None:
                out.append(current)
            else:
                pending.extend(split)
            if len(out) + len(pending) > MAX_EXPANSIONS:
                return None
    except _TooMany:
        return None
    return out


def _is(piece: Piece, char: str) -> bool:
    return piece.kind == "lit" and piece.text == char


def _closing(items: list[Piece], start: int) -> tuple[int, list[int]] | None:
    """The `}` matching the `{` at `start`, and the commas at its top level."""
    depth, commas = 0, list[int]()
    for end in range(start, len(items)):
        if _is(items[end], "{"):
            depth += 1
        elif _is(items[end], "}"):
            depth -= 1
            if depth == 0:
                return end, commas
        elif _is(items[end], ",") and depth == 1:
            commas.append(end)
    return None


def _first_brace(items: list[Piece]) -> list[list[Piece]] | None:
    """The alternatives of the first expandable brace, or None when there is none."""
    for start, item in enumerate(items):
        if not _is(item, "{"):
            continue
        found = _closing(items, start)
        if found is None:
            continue
        end, commas = found
        head, tail = items[:start], items[end + 1 :]
        if commas:
            bounds = [start, *commas, end]
            return [head + items[a + 1 : b] + tail for a, b in itertools.pairwise(bounds)]
        inner = items[start + 1 : end]
        if all(p.kind == "lit" for p in inner):
            sequence = _sequence("".join(p.text for p in inner))
            if sequence is not None:
                return [[*head, Piece("quoted", s), *tail] for s in sequence]
    return None


def _sequence(text: str) -> list[str] | None:
    match = _RANGE.match(text)
    if match is None:
        return None
    a, b = match.group(1), match.group(2)
    numeric = a.lstrip("-").isdigit() and b.lstrip("-").isdigit()
    if numeric:
        lo, hi = int(a), int(b)
    elif a.isalpha() and b.isalpha():
        lo, hi = ord(a), ord(b)
    else:
        return None
    if abs(hi - lo) >= MAX_EXPANSIONS:
        raise _TooMany(text)
    step = 1 if hi >= lo else -1
    numbers = range(lo, hi + step, step)
    return [str(n) for n in numbers] if numeric else [chr(n) for n in numbers]


ROOT_VALUE = Value(ROOT, ROOT, False)
"""`$HOME` and the first `$PWD`: the workspace root in both the sandbox and the local
backend."""


def initial_env() -> Env:
    """What every command starts with: HOME and PWD are the workspace, and IFS splits on
    blanks (so `rm${IFS}-rf${IFS}src` reads as `rm -rf src`)."""
    ifs = Value(" ", " ", False)
    return Env(
        {"HOME": Binding((ROOT_VALUE,)), "PWD": Binding((ROOT_VALUE,)), "IFS": Binding((ifs,))}
    )


def name_of(text: str) -> str | None:
    return text if _NAME.fullmatch(text) else None
