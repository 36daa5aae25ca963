"""Tool-call repair: fix what a model reliably gets slightly wrong, refuse what is unsafe.

Pure functions, no I/O. The loop calls them between the provider's reply and dispatch:

    resolution = resolve_tool_name(call.name, registry.names())
    args = repair_json_arguments(call.arguments)   # dict, or a message for the model
    args = coerce_arguments(args, tool.parameters)

Every repair is one whose meaning is unambiguous (a case slip, a trailing comma, "42" for
an integer). Anything that would need a guess is left alone, so the handler or the model
sees the real mistake instead of a silently different call.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

NAME_CUTOFF = 0.7
MAX_ECHOED_NAME = 64
"""An invented name is echoed back at most this long: a model that put a paragraph in the
name field must not get the paragraph back (and again on every retry)."""

EMPTY_NAME_MESSAGE = "error: the tool call has no name"


@dataclass(frozen=True, slots=True)
class NameResolution:
    """How a call's tool name maps onto the registry.

    `name` is the tool to run (for "exact" and "repaired"); `message` is the error result
    to give the model instead (for "empty" and "unknown").
    """

    status: Literal["exact", "repaired", "empty", "unknown"]
    name: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.name is not None


_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s\-_.]+")


def _normalise(name: str) -> str:
    """The spelling-insensitive key: `ReadFile`, `read-file`, `READ_FILE` -> `read_file`."""
    snake = _CAMEL_BOUNDARY.sub("_", name.strip())
    return _SEPARATORS.sub("_", snake).strip("_").lower()


def resolve_tool_name(name: str, known: Sequence[str]) -> NameResolution:
    """Map `name` onto one of `known`, repairing only a single unambiguous near-miss.

    An empty name gets a short rejection *without* the catalog: weak models emit empty
    names after echoing tool-call syntax they read in a file, and listing every tool feeds
    that imitation loop more names and inflates each retry. A genuine typo with no single
    repair gets the catalog, because that is what the model needs to fix it.
    """
    if name in known:
        return NameResolution("exact", name=name)
    stripped = name.strip()
    if not stripped:
        return NameResolution("empty", message=EMPTY_NAME_MESSAGE)

    by_key: dict[str, list[str]] = {}
    for candidate in known:
        by_key.setdefault(_normalise(candidate), []).append(candidate)

    def unique(key: str) -> str | None:
        matches = by_key.get(key, [])
        # Two tools that normalise alike (read_file and ReadFile) make any guess a coin toss.
        return matches[0] if len(matches) == 1 else None

    key = _normalise(stripped)
    found = unique(key)
    if found is None and "." in stripped:
        # "functions.read_file" / "default_api.read_file": a namespace some models prepend.
        found = unique(_normalise(stripped.rsplit(".", 1)[-1]))
    if found is None and key:
        found = _closest(key, [k for k, v in by_key.items() if len(v) == 1])
        found = by_key[found][0] if found is not None else None
    if found is not None:
        return NameResolution("repaired", name=found)

    shown = stripped if len(stripped) <= MAX_ECHOED_NAME else stripped[:MAX_ECHOED_NAME] + "..."
    catalog = ", ".join(sorted(known)) or "(none)"
    return NameResolution("unknown", message=f"error: unknown tool {shown!r}; available: {catalog}")


def _closest(key: str, keys: list[str]) -> str | None:
    """The single best difflib match at or above the cutoff; a tie is no match."""
    scored = []
    for candidate in keys:
        matcher = difflib.SequenceMatcher(None, key, candidate)
        # The same cheap-to-exact cascade get_close_matches uses.
        if matcher.real_quick_ratio() >= NAME_CUTOFF and matcher.quick_ratio() >= NAME_CUTOFF:
            ratio = matcher.ratio()
            if ratio >= NAME_CUTOFF:
                scored.append((ratio, candidate))
    if not scored:
        return None
    scored.sort(reverse=True)
    if len(scored) > 1 and scored[0][0] == scored[1][0]:
        return None
    return scored[0][1]


# ----------------------------------------------------------------------- JSON arguments

_FENCE = re.compile(r"\A\s*```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?[ \t]*```\s*\Z", re.DOTALL)
_CLOSER = {"{": "}", "[": "]"}


def repair_json_arguments(raw: str, *, truncated: bool = False) -> dict[str, Any] | str:
    """The call's arguments as an object, repairing only safe damage; else a message.

    Safe repairs: a markdown code fence around the JSON, trailing commas before `}` or `]`,
    missing closing quote/brackets/braces at the very end, and an object double-encoded as
    a JSON string. The message (for the model, like `parse_arguments` in the registry) says
    why the arguments are unusable.

    Pass `truncated=True` when the upstream reply was cut off (finish_reason "length"):
    closing a cut-off object would hand a writer a silently truncated `content`, so then
    missing closers are an error rather than a repair.
    """
    if not raw.strip():
        return {}
    first_error: json.JSONDecodeError | None = None
    for candidate in _repair_candidates(raw, close=not truncated):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, str):
            # Double-encoded: '"{\"path\": \"a\"}"'. Only accepted if it holds an object.
            try:
                inner = json.loads(value)
            except json.JSONDecodeError:
                inner = value
            value = inner if isinstance(inner, dict) else value
        if isinstance(value, dict):
            return value
        return f"arguments must be a JSON object, got {_json_type(value)}"
    assert first_error is not None  # the loop always tries at least the raw text
    return f"arguments are not valid JSON ({first_error.msg} at position {first_error.pos})"


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _repair_candidates(raw: str, *, close: bool) -> list[str]:
    """The raw text, then progressively repaired versions of it (no duplicates)."""
    out = [raw]
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
        out.append(text)
    text = _strip_trailing_commas(text)
    out.append(text)
    if close:
        closed = _close_open_structures(text)
        if closed is not None:
            out.append(closed)
    return list(dict.fromkeys(out))


def _strip_trailing_commas(text: str) -> str:
    """Drop commas followed (past whitespace) by `}` or `]`, never inside a string."""
    out: list[str] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == ",":
            rest = text[i + 1 :].lstrip()
            if rest[:1] in ("}", "]"):
                continue
        out.append(ch)
    return "".join(out)


def _close_open_structures(text: str) -> str | None:
    """Append the missing closing quote and brackets, or None if the text isn't cut short.

    Only a clean prefix of a JSON document qualifies: a mismatched closer means damage in
    the middle, which no suffix fixes safely.
    """
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _CLOSER:
            stack.append(_CLOSER[ch])
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None
    if not stack and not in_string:
        return None
    if escaped:
        return None  # cut inside an escape sequence: the intended character is unknowable
    suffix = '"' if in_string else ""
    body = text + suffix
    # A cut right after a comma leaves `{"a": 1,` which closing alone would not fix.
    body = body.rstrip()
    if body.endswith(","):
        body = body[:-1]
    return body + "".join(reversed(stack))


# ------------------------------------------------------------------------ type coercion

_JSON_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_MISSING = object()


def coerce_arguments(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of `args` with string values converted to the types `schema` declares.

    Models routinely send `"42"` for an integer or `"true"` for a boolean. Only a clean
    conversion is applied; anything else is left as sent so the handler reports the real
    mistake. Values that already satisfy a declared type are never touched (a property
    typed ["string", "integer"] keeps "42" as text).
    """
    return _coerce_object(args, schema)


def _coerce_object(obj: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    extra = schema.get("additionalProperties")
    out: dict[str, Any] = {}
    for key, value in obj.items():
        sub = properties.get(key, extra)
        out[key] = _coerce_value(value, sub) if isinstance(sub, dict) else value
    return out


def _declared_types(schema: dict[str, Any]) -> list[str]:
    """The JSON types a schema admits: `type` as a string or list, or anyOf/oneOf branches."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    types: list[str] = []
    for branch in _branches(schema):
        types.extend(t for t in _declared_types(branch) if t not in types)
    return types


def _branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            found.extend(o for o in options if isinstance(o, dict))
    return found


def _schema_for(schema: dict[str, Any], json_type: str) -> dict[str, Any]:
    """The (sub)schema describing values of `json_type`, for recursing into containers."""
    own = schema.get("type")
    if own == json_type or (isinstance(own, list) and json_type in own):
        return schema
    for branch in _branches(schema):
        if json_type in _declared_types(branch):
            return branch
    return schema


def _satisfies(value: object, json_type: str) -> bool:
    match json_type:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "null":
            return value is None
        case "array":
            return isinstance(value, list)
        case "object":
            return isinstance(value, dict)
    return False


def _coerce_value(value: Any, schema: dict[str, Any]) -> Any:
    types = _declared_types(schema)
    if isinstance(value, str) and types and not any(_satisfies(value, t) for t in types):
        converted = _from_string(value, types)
        if converted is not _MISSING:
            value = converted
    # Recurse into containers whether they arrived as JSON or were just decoded from text.
    if isinstance(value, dict) and "object" in types:
        return _coerce_object(value, _schema_for(schema, "object"))
    if isinstance(value, list) and "array" in types:
        items = _schema_for(schema, "array").get("items")
        if isinstance(items, dict):
            return [_coerce_value(item, items) for item in value]
    return value


def _from_string(text: str, types: list[str]) -> Any:
    """The first clean conversion of `text` to one of `types`, or _MISSING."""
    s = text.strip()
    for json_type in types:
        if json_type == "integer" and _JSON_INT.fullmatch(s):
            return int(s)
        if json_type == "number" and _JSON_NUMBER.fullmatch(s):
            # "42" stays an int for a number: it is one, and int keeps it exact.
            return int(s) if _JSON_INT.fullmatch(s) else float(s)
        if json_type == "boolean" and s.lower() in ("true", "false"):
            return s.lower() == "true"
        if json_type == "null" and s.lower() == "null":
            return None
        if json_type in ("array", "object") and s[:1] in ("[", "{"):
            try:
                decoded = json.loads(s)
            except json.JSONDecodeError:
                continue
            if _satisfies(decoded, json_type):
                return decoded
    return _MISSING
