"""Fences around text a tool brought in from outside (a web page, an MCP server's result).

The text may be written to steer the model ("ignore previous instructions"), so it is
wrapped in marks the prompt's tool guidance tells the model to read as data, never as
instructions; and the marks are made impossible to spell inside it, or the text could
close its own fence and continue as if Courier had said the rest.
"""

from __future__ import annotations

WRAP_MIN_CHARS = 32
"""Shorter text is left bare: too short to carry an instruction, and marks around a word
cost more tokens than the word."""


def defang(text: str) -> str:
    """Make the fences' delimiters impossible to spell inside the wrapped text."""
    return text.replace("<<<", "‹‹‹").replace(">>>", "›››")


def open_mark(kind: str, source: str) -> str:
    return f"<<<UNTRUSTED {kind} from {defang(source)}>>>"


def close_mark(kind: str) -> str:
    return f"<<<END UNTRUSTED {kind}>>>"


def fence(text: str, source: str, *, kind: str) -> str:
    """`text` defanged, and fenced as untrusted `kind` from `source` unless it is short."""
    body = defang(text)
    if len(body) < WRAP_MIN_CHARS:
        return body
    return f"{open_mark(kind, source)}\n{body}\n{close_mark(kind)}"
