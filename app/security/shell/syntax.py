"""Read a bash command line the way bash will run it: simple commands, words, redirections.

The command guard's `normalise` flattens a command to catch spellings, and that is right for
the floor; it cannot say which word a `>` writes to, what `python3 -c` will run, what a
heredoc feeds to which program, or which file `$n.md` names. The guard's effect checks
(`app/security/shell/effects.py`) need that structure, so this module keeps it: every simple
command (including those inside `$( )`, backticks, `<( )` and heredoc bodies, since they
run too) as words made of literal, quoted, variable and substitution pieces.

Structure comes from the raw text: folding look-alike characters first would let a
fullwidth `＂` (a plain letter to bash) open a quote that hides `; rm -rf src` from us.
Words are folded one at a time afterwards (`fold`), which cannot change where they end.

It reads generously and never guesses: an unterminated quote, substitution or `${` makes
the script `unreadable`, and the guard asks instead.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Literal

PieceKind = Literal["lit", "quoted", "var", "sub"]
ROOT = "\x00"
"""Stands for the workspace root (`~`, `$HOME`): the terminal's HOME and first cwd. NUL
cannot occur in a command (the terminal refuses it), so it cannot be spelled."""
MAX_DEPTH = 16
"""Nested substitutions deeper than this are unreadable rather than a stack to exhaust."""

# Letters that render like ASCII but NFKC leaves alone (Cyrillic and Greek). A name spelled
# with them would not run as the ASCII one, but reading it as ASCII errs towards asking.
CONFUSABLES = str.maketrans(
    {
        "а": "a",
        "е": "e",
        "о": "o",
        "р": "p",
        "с": "c",
        "у": "y",
        "х": "x",
        "і": "i",
        "ј": "j",
        "ѕ": "s",
        "ԁ": "d",
        "һ": "h",
        "м": "m",
        "т": "t",
        "к": "k",
        "в": "b",
        "н": "h",
        "г": "r",
        "ο": "o",
        "α": "a",
        "ν": "v",
        "ρ": "p",
        "τ": "t",
        "ε": "e",
        "ι": "i",
        "κ": "k",
        "μ": "m",
    }
)


def fold(text: str) -> str:
    """NFKC, format characters (zero-width joiners) dropped, look-alikes read as ASCII."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    return text.translate(CONFUSABLES)


@dataclass(frozen=True, slots=True)
class Piece:
    kind: PieceKind
    """`lit`: unquoted text, where globs and braces are live; `quoted`: text whose special
    characters are not; `var`: a parameter expansion (`text` is its name or `${...}` body);
    `sub`: a command or process substitution (`text` is its source)."""
    text: str
    quoted: bool = False
    """For `var`: inside double quotes, so its value is neither split nor globbed."""


@dataclass(frozen=True, slots=True)
class Word:
    pieces: tuple[Piece, ...]

    def literal(self) -> str | None:
        """The word's value when it has no expansion, folded; else None."""
        if any(p.kind in ("var", "sub") for p in self.pieces):
            return None
        return fold("".join(p.text for p in self.pieces))

    def display(self) -> str:
        out: list[str] = []
        for p in self.pieces:
            if p.kind == "var":
                out.append("${" + p.text + "}")
            elif p.kind == "sub":
                out.append("$(" + p.text + ")")
            else:
                out.append(p.text.replace(ROOT, "~"))
        return fold("".join(out))

    @property
    def quoted(self) -> bool:
        return any(p.kind == "quoted" for p in self.pieces)


@dataclass(frozen=True, slots=True)
class Redirect:
    op: str
    """`>`, `>>`, `>|`, `&>`, `&>>`, `<>`, `<`, `<<`, `<<-`, `<<<`, `>&`, `<&`."""
    target: Word
    """The file, the heredoc delimiter, or the here-string."""
    fd: str = ""
    body: str | None = None
    """A heredoc's text (or a here-string's, when it has no expansion)."""
    body_expands: bool = False
    """An unquoted heredoc delimiter: `$` and backticks in the body are expanded first."""

    @property
    def writes(self) -> bool:
        if self.op in (">&", "<&"):  # `2>&1` duplicates a descriptor; `>& file` writes one
            text = self.target.literal()
            return self.op == ">&" and not (text is not None and re.fullmatch(r"\d*-?", text))
        return self.op in (">", ">>", ">|", "&>", "&>>", "<>")

    @property
    def reads(self) -> bool:
        return self.op in ("<", "<>")


@dataclass(frozen=True, slots=True)
class Command:
    words: tuple[Word, ...]
    redirects: tuple[Redirect, ...] = ()
    piped: bool = False
    """Its standard input is the previous command's output (`a | b`: true for b)."""
    depth: int = 0
    """0 at the top level; more inside substitutions."""


@dataclass(frozen=True, slots=True)
class Script:
    commands: tuple[Command, ...]
    unreadable: str = ""
    """Why the text could not be read; empty when it could."""


class Unreadable(Exception):
    pass


_OPERATORS = (
    "<<<",
    "<<-",
    "&>>",
    ";;&",
    "&&",
    "||",
    "|&",
    ";;",
    ";&",
    "<<",
    ">>",
    ">|",
    "&>",
    "<>",
    ">&",
    "<&",
    ";",
    "&",
    "|",
    "<",
    ">",
    "(",
    ")",
    "\n",
)
_REDIRECTS = frozenset({"<<<", "<<-", "&>>", "<<", ">>", ">|", "&>", "<>", ">&", "<&", "<", ">"})
_WORD_END = frozenset(" \t\n;&|<>()")
_TILDE = re.compile(r"~(?=/|$|[\s;&|<>()])")
_FD = re.compile(r"\d+(?=[<>])")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAM = re.compile(r"[0-9@*#?$!-]")
_HEX_DIGITS = {"x": re.compile(r"[0-9a-fA-F]{1,2}"), "u": re.compile(r"[0-9a-fA-F]{1,4}")}
_HEX_DIGITS["U"] = re.compile(r"[0-9a-fA-F]{1,8}")
_OCTAL_DIGITS = re.compile(r"[0-7]{1,3}")
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b"}
_ANSI_C.update({"f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"})


@dataclass
class _Pending:
    """A heredoc whose body starts after the current line."""

    delimiter: str
    strip_tabs: bool
    expands: bool
    redirect: int
    """Position of its redirect in its command's list, to fill in the body."""
    command: int = -1
    """Position of its command in the output, once that command is complete."""


@dataclass
class _Lexer:
    text: str
    out: list[Command]
    depth: int = 0
    pos: int = 0
    pending: list[_Pending] = field(default_factory=list)

    # ------------------------------------------------------------ the command list

    def run(self, closer: str = "", *, piped: bool = False) -> int:
        """Read commands until the end, or until an unmatched `closer` (`)`); `piped`: the
        first command reads another's output."""
        if self.depth > MAX_DEPTH:
            raise Unreadable("substitutions nested too deep")
        words: list[Word] = []
        redirects: list[Redirect] = []
        parens = 0

        def finish(next_piped: bool) -> None:
            nonlocal words, redirects, piped
            if words or redirects:
                for heredoc in self.pending:
                    if heredoc.command < 0:
                        heredoc.command = len(self.out)
                self.out.append(Command(tuple(words), tuple(redirects), piped, self.depth))
            words, redirects, piped = [], [], next_piped

        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in " \t":
                self.pos += 1
                continue
            if self.text.startswith("\\\n", self.pos):
                self.pos += 2
                continue
            if ch == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
                continue
            if closer and ch == closer and parens == 0:
                finish(False)
                self.pos += 1
                return self.pos
            if ch in "<>" and self.text.startswith("(", self.pos + 1):
                words.append(self._word())  # process substitution: a word naming a pipe
                continue
            op = self._operator()
            if op is None:
                fd = self._fd_prefix()
                if fd is not None:
                    redirects.append(self._redirect(fd, redirects))
                    continue
                words.append(self._word())
                continue
            if op in _REDIRECTS:
                self.pos -= len(op)  # `_redirect` reads the operator itself
                redirects.append(self._redirect("", redirects))
                continue
            if op == "(":
                parens += 1
            elif op == ")":
                parens = max(0, parens - 1)
            if op == "\n":
                finish(False)
                self._heredoc_bodies()
            else:
                finish(op in ("|", "|&"))
        if closer:
            raise Unreadable(f"no closing {closer!r}")
        finish(False)
        if self.pending:
            self._heredoc_bodies()
        return self.pos

    def _operator(self) -> str | None:
        for op in _OPERATORS:
            if self.text.startswith(op, self.pos):
                self.pos += len(op)
                return op
        return None

    def _fd_prefix(self) -> str | None:
        """`2>` and `10<`: a run of digits directly followed by a redirection."""
        match = _FD.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return match.group(0)

    def _redirect(self, fd: str, redirects: list[Redirect]) -> Redirect:
        op = self._operator()
        assert op is not None and op in _REDIRECTS
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1
        if self.pos >= len(self.text) or self.text[self.pos] in "\n;&|()<>":
            raise Unreadable(f"{op} without a target")
        target = self._word()
        if op in ("<<", "<<-"):
            delimiter = "".join(p.text for p in target.pieces if p.kind != "sub")
            self.pending.append(_Pending(delimiter, op == "<<-", not target.quoted, len(redirects)))
            return Redirect(op, target, fd)
        if op == "<<<":
            expands = target.literal() is None
            return Redirect(op, target, fd, body=target.literal(), body_expands=expands)
        return Redirect(op, target, fd)

    def _heredoc_bodies(self) -> None:
        for heredoc in self.pending:
            lines: list[str] = []
            while self.pos < len(self.text):
                end = self.text.find("\n", self.pos)
                line = self.text[self.pos : len(self.text) if end < 0 else end]
                self.pos = len(self.text) if end < 0 else end + 1
                check = line.lstrip("\t") if heredoc.strip_tabs else line
                if check == heredoc.delimiter:
                    break
                lines.append(check)
            body = "\n".join(lines)
            if heredoc.expands:
                # The outer shell expands `$(...)` and backticks in the body: they run.
                _Lexer(body, self.out, self.depth + 1).expansions_only()
            command = self.out[heredoc.command]
            redirects = list(command.redirects)
            old = redirects[heredoc.redirect]
            redirects[heredoc.redirect] = Redirect(
                old.op, old.target, old.fd, body=body, body_expands=heredoc.expands
            )
            self.out[heredoc.command] = Command(
                command.words, tuple(redirects), command.piped, command.depth
            )
        self.pending = []

    def expansions_only(self) -> None:
        """Collect the substitutions in text that is otherwise literal (a heredoc body)."""
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\":
                self.pos += 2
            elif ch in "$`":
                self._expansion([])
            else:
                self.pos += 1

    # ------------------------------------------------------------ words

    def _word(self) -> Word:
        pieces: list[Piece] = []
        start = self.pos
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch in "<>" and self.text.startswith("(", self.pos + 1):
                self.pos += 2
                # `>(sh)`: what the outer command writes is the inner one's input.
                pieces.append(Piece("sub", self._nested(")", piped=ch == ">")))
                continue
            if ch in _WORD_END:
                break
            if ch == "\\":
                nxt = self.text[self.pos + 1 : self.pos + 2]
                self.pos += 2
                if nxt and nxt != "\n":
                    pieces.append(Piece("quoted", nxt))
                continue
            if ch == "'":
                end = self.text.find("'", self.pos + 1)
                if end < 0:
                    raise Unreadable("unterminated single quote")
                pieces.append(Piece("quoted", self.text[self.pos + 1 : end]))
                self.pos = end + 1
                continue
            if ch == '"':
                self.pos += 1
                self._double_quoted(pieces)
                continue
            if self.text.startswith("$'", self.pos):
                pieces.append(Piece("quoted", self._ansi_c()))
                continue
            if self.text.startswith('$"', self.pos):
                self.pos += 2
                self._double_quoted(pieces)
                continue
            if ch in "$`":
                self._expansion(pieces)
                continue
            if ch == "~" and self.pos == start and _TILDE.match(self.text, self.pos):
                pieces.append(Piece("lit", ROOT))
                self.pos += 1
                continue
            pieces.append(Piece("lit", ch))
            self.pos += 1
        return Word(_merge(pieces))

    def _double_quoted(self, pieces: list[Piece]) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.pos += 1
                return
            if ch == "\\":
                nxt = self.text[self.pos + 1 : self.pos + 2]
                self.pos += 2
                if nxt in ("$", "`", '"', "\\"):
                    pieces.append(Piece("quoted", nxt))
                elif nxt != "\n":
                    pieces.append(Piece("quoted", "\\" + nxt))
                continue
            if ch in "$`":
                self._expansion(pieces, quoted=True)
                continue
            pieces.append(Piece("quoted", ch))
            self.pos += 1
        raise Unreadable("unterminated double quote")

    def _expansion(self, pieces: list[Piece], quoted: bool = False) -> None:
        """`$name`, `${...}`, `$(...)`, `$((...))` or a backtick substitution at `pos`."""
        text = self.text
        if text[self.pos] == "`":
            end = self.pos + 1
            while end < len(text) and text[end] != "`":
                end += 2 if text[end] == "\\" else 1
            if end >= len(text):
                raise Unreadable("unterminated backtick")
            source = re.sub(r"\\([$`\\])", r"\1", text[self.pos + 1 : end])
            _Lexer(source, self.out, self.depth + 1).run()
            pieces.append(Piece("sub", source))
            self.pos = end + 1
            return
        nxt = text[self.pos + 1 : self.pos + 2]
        if nxt == "(":
            self.pos += 2
            pieces.append(Piece("sub", self._nested(")")))
            return
        if nxt == "{":
            end = _closing_brace(text, self.pos + 2)
            body = text[self.pos + 2 : end]
            # `${x:-$(rm -rf src)}` runs the substitution: read the body for those.
            _Lexer(body, self.out, self.depth + 1).expansions_only()
            pieces.append(Piece("var", body, quoted))
            self.pos = end + 1
            return
        match = _NAME.match(text, self.pos + 1) or _SPECIAL_PARAM.match(text, self.pos + 1)
        if match is None:
            pieces.append(Piece("quoted" if quoted else "lit", "$"))
            self.pos += 1
            return
        pieces.append(Piece("var", match.group(0), quoted))
        self.pos = match.end()

    def _nested(self, closer: str, *, piped: bool = False) -> str:
        start = self.pos
        inner = _Lexer(self.text, self.out, self.depth + 1, self.pos)
        self.pos = inner.run(closer, piped=piped)
        return self.text[start : self.pos - 1]

    def _ansi_c(self) -> str:
        out: list[str] = []
        i = self.pos + 2
        text = self.text
        while i < len(text) and text[i] != "'":
            if text[i] != "\\" or i + 1 >= len(text):
                out.append(text[i])
                i += 1
                continue
            esc = text[i + 1]
            if esc in _ANSI_C:
                out.append(_ANSI_C[esc])
                i += 2
                continue
            pattern = _HEX_DIGITS.get(esc) or (_OCTAL_DIGITS if esc.isdigit() else None)
            digits = pattern.match(text, i + (1 if esc.isdigit() else 2)) if pattern else None
            if digits is None:
                out.append("\\" + esc)
                i += 2
                continue
            value = int(digits.group(0), 8 if esc.isdigit() else 16)
            out.append(chr(value) if value < 0x110000 else "")
            i = digits.end()
        if i >= len(text):
            raise Unreadable("unterminated $'...'")
        self.pos = i + 1
        return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                break
            i = end + 1
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise Unreadable("unterminated ${")


def _merge(pieces: list[Piece]) -> tuple[Piece, ...]:
    merged: list[Piece] = []
    for piece in pieces:
        if merged and piece.kind in ("lit", "quoted") and merged[-1].kind == piece.kind:
            merged[-1] = Piece(piece.kind, merged[-1].text + piece.text)
        else:
            merged.append(piece)
    return tuple(merged)


def parse(text: str) -> Script:
    """Every simple command `text` would run, in reading order, with its words."""
    out: list[Command] = []
    try:
        _Lexer(text, out).run()
    except Unreadable as exc:
        return Script(tuple(out), str(exc))
    except RecursionError:
        return Script(tuple(out), "nested too deep")
    return Script(tuple(out))
