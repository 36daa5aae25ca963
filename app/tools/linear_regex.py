"""Regexes for search_files on a linear-time engine (RE2), never Python's backtracking `re`.

`re` backtracks: `(a+)+$` over 27 `a`s and a `!` takes seconds and doubles per extra
character, and it holds the interpreter lock the whole time, so one pattern from a poisoned
file or web page would freeze every session and /health. RE2 matches in time linear in
the input whatever the pattern, at the price of backreferences and lookaround, which are
refused with a clear message instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import re2

MAX_PROGRAM_BYTES = 64 * 1024 * 1024
"""RE2's memory budget for one compiled pattern (its DFA cache); a huge one fails cleanly."""


class RegexError(ValueError):
    """The pattern is not valid, or needs a feature a linear-time engine cannot offer."""


@dataclass(frozen=True, slots=True)
class LinearRegex:
    """A compiled pattern whose `search` runs in time linear in the text."""

    pattern: str
    _compiled: Any

    def search(self, text: str) -> bool:
        return self._compiled.search(text) is not None


def compile_linear(pattern: str, *, literal: bool = False) -> LinearRegex:
    options = re2.Options()
    options.log_errors = False  # else RE2 prints every refused pattern to our stderr
    options.max_mem = MAX_PROGRAM_BYTES
    source = re.escape(pattern) if literal else pattern
    try:
        compiled = re2.compile(source, options=options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else "invalid pattern"
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", errors="replace")
        raise RegexError(str(detail)) from None
    return LinearRegex(pattern, compiled)
