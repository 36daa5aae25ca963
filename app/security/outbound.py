"""The last line before the upstream: no request body leaves carrying the server's own secrets.

Every other guard keeps secrets out of what the model sees (context files opened beneath the
workspace, tool output redacted); this one holds when one of them is bypassed. Each upstream
body, already encoded, is searched once for every credential the process holds (API keys,
upstream keys, the token secret) as raw bytes, as a JSON string escapes them, and in base64
(standard and URL-safe) at all three alignments, so a secret encoded in the middle of a
longer stream is found too. A match refuses the call before a byte is sent: the turn ends
with `secret_in_request` rather than hand a provider a key it can replay.

The search is built once at startup. With a few forms (two or three secrets) it is one
`bytes.find` per form: CPython's search skips through text on the rarest bytes, about four
times faster than a DFA on a 10 KB body of prose and tool schemas. Past `FIND_LIMIT` forms
it is one RE2 pass over an alternation of literals, whose cost is linear in the body and
barely moves with the number of secrets (Python's `re` tries every alternative at every
byte, ~15 times slower here). Secrets shorter than `MIN_SECRET_BYTES` are not searched:
short strings occur in ordinary text, and no such value is accepted as a key anyway.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import re2

MIN_SECRET_BYTES = 8
FIND_LIMIT = 16
"""Up to this many forms, a find per form beats the automaton (benchmarks/instructions.py)."""
_MAX_PROGRAM_BYTES = 64 * 1024 * 1024


_HELD = "the request to the model carried one of the server's own credentials, so it was not sent"


class SecretInRequest(Exception):
    """A request body carries one of the server's secrets; it was not sent."""


def _base64_cores(secret: bytes) -> set[bytes]:
    """The base64 text that encodes `secret` wherever it starts in a longer byte stream.

    Base64 maps 3 bytes to 4 characters, so a secret starting at offset 0, 1 or 2 of a
    group comes out as three different strings. In each, the characters that also carry
    bits of the neighbouring bytes are cut off; what remains depends on the secret alone.
    """
    cores: set[bytes] = set()
    for shift in range(3):
        total = shift + len(secret)
        first = (0, 2, 3)[shift]  # characters that mix in the bytes before the secret
        last = total // 3 * 4 + (0, 1, 2)[total % 3]  # ... and after it
        padded = b"\0" * shift + secret
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            core = encode(padded)[first:last]
            if len(core) >= MIN_SECRET_BYTES:
                cores.add(core)
    return cores


def secret_forms(secret: str) -> set[bytes]:
    """Every byte string that would show `secret` in an encoded request body."""
    raw = secret.encode("utf-8")
    if len(raw) < MIN_SECRET_BYTES:
        return set()
    forms = {raw, *_base64_cores(raw)}
    # As a JSON string would carry it: orjson keeps non-ASCII as UTF-8, `ensure_ascii`
    # writes \uXXXX; both escape quotes, backslashes and control characters.
    for ascii_only in (False, True):
        forms.add(json.dumps(secret, ensure_ascii=ascii_only)[1:-1].encode("utf-8"))
    return forms


_JOINS = frozenset(b',[]{}"\0')
"""The bytes a body puts between the pieces it is spliced from (`,` between messages, the
brackets and braces around them, quotes in the envelope). A form holding none of them can
only occur inside one piece; one that holds any is searched on the whole body every time."""
_SERIALS = itertools.count(1)


class _Search:
    """One search for a set of forms: a find per form when they are few, else RE2."""

    def __init__(self, forms: set[bytes]) -> None:
        self.forms = tuple(sorted(forms)) if len(forms) <= FIND_LIMIT else ()
        self.compiled: Any = None
        if len(forms) > FIND_LIMIT:
            options = re2.Options()
            options.log_errors = False
            options.max_mem = _MAX_PROGRAM_BYTES
            # Latin-1: the pattern's bytes match the body's bytes one for one.
            options.encoding = re2.Options.Encoding.LATIN1
            pattern = b"|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
            self.compiled = re2.compile(pattern, options)

    def refuse(self, body: bytes) -> None:
        for form in self.forms:
            if form in body:
                raise SecretInRequest(_HELD)
        if self.compiled is not None and self.compiled.search(body) is not None:
            raise SecretInRequest(_HELD)


class OutboundScan:
    """Built once from the process's secrets; `check` refuses a body that shows one.

    A long session's body is mostly messages an earlier call already sent, kept encoded
    (app/providers/encoded_history.py); searching all of it again on every call was 15 % of
    a late turn's CPU with 40 KB tool outputs. So the adapters search what is new:
    `check_pieces` on each fragment as it is encoded (before it is kept, so a refused one is
    never reused unsearched) and on the envelope, `check_joined` on the whole body for the
    rare forms a join between pieces could complete. `serial` names this scan in the kept
    encodings' key: fragments kept under another scan (other secrets, or none) are never
    taken as searched."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[bytes] = set()
        for secret in secrets:
            forms |= secret_forms(secret)
        joined = {form for form in forms if _JOINS.intersection(form)}
        self._all = _Search(forms)
        self._pieces = _Search(forms - joined)
        self._joined = _Search(joined)
        self._compiled = self._all.compiled
        self.serial = next(_SERIALS)

    def check(self, body: bytes) -> None:
        """Raise `SecretInRequest` when `body` carries a secret; never says which."""
        self._all.refuse(body)

    def check_pieces(self, pieces: Sequence[bytes]) -> None:
        """`check` for the forms that fit inside one piece, over `pieces` in one pass: a NUL
        (never in encoded JSON, never in such a form) keeps a match from spanning two."""
        if pieces:
            self._pieces.refuse(b"\0".join(pieces))

    def check_joined(self, body: bytes) -> None:
        """The rest of `check`: the forms a join between pieces could complete."""
        self._joined.refuse(body)

    def check_joined_pieces(self, pieces: Sequence[bytes]) -> None:
        """`check_joined` of the body `pieces` make, joined only when a form needs it (a
        long session's body is megabytes: the transport sends the pieces as they are)."""
        if self._joined.forms or self._joined.compiled is not None:
            self._joined.refuse(b"".join(pieces))


NO_SCAN = OutboundScan(())
"""For adapters built outside the server (tests, benchmarks): nothing to search for."""
