"""Validate JSON bodies Courier emits against the official OpenAI OpenAPI spec.

Usage::

    from tests.support.spec import errors, validate

    validate("CreateChatCompletionResponse", body)  # AssertionError listing every problem
    problems = errors("CreateChatCompletionStreamResponse", chunk)  # [] when valid

The spec lives outside the repo, at ``<repo>/../shared/spec/openai-openapi.yaml``; set
``COURIER_OPENAI_SPEC`` to use another copy. It is parsed once per process (libyaml
``CSafeLoader``; ~1.4 s for the 3 MB file including conversion, so there is no on-disk cache)
and converted to plain JSON Schema 2020-12:

* ``nullable: true`` (OpenAPI 3.0 style, ~111 places, ignored by JSON Schema) becomes
  ``type: [T, "null"]`` (plus ``None`` in any ``enum``), or ``{"anyOf": [node, {"type": "null"}]}``
  for a node without ``type`` (``$ref`` / ``allOf`` / ``oneOf`` / ``anyOf``). ``nullable: false``
  is dropped.
* The 3.0 idiom ``allOf: [{$ref: X}, {nullable: true}]`` (assistants/runs schemas) becomes
  nullable ``X``; taken literally, the bare ``{nullable: true}`` member would not admit null.
* Boolean ``exclusiveMinimum``/``exclusiveMaximum`` (3.0 style, fine-tuning schemas) become the
  numeric 2020-12 form.
* Draft 2019-09 ``$recursiveAnchor: true`` / ``$recursiveRef: "#"`` (``CompoundFilter``,
  ``BetaCompoundFilter``), which 2020-12 ignores, become a plain ``$ref`` to the component.

``format`` is not checked (the spec uses non-standard ones such as ``unixtime``), and the
OpenAPI ``discriminator`` keyword is ignored; ``oneOf`` alone decides.

What the spec (as shipped here) requires of a server emitting these bodies (things easy to get
wrong):

* No schema below sets ``additionalProperties: false``: extra keys (e.g. ``usage.cost``,
  ``usage.courier``, unknown top-level keys) are accepted everywhere.
* ``CreateChatCompletionResponse``: required ``id, object, created, model, choices``.
  ``object`` must be ``"chat.completion"``; ``created`` an integer (``int(time.time())``, not a
  float). ``usage`` is optional but NOT nullable (omit it rather than send ``null``).
  ``system_fingerprint`` is an optional string, NOT nullable (omit it rather than send ``null``).
  ``service_tier``, ``metadata`` and ``moderation`` are nullable.
  Each choice requires ``index, message, finish_reason, logprobs``: ``logprobs`` must be present
  even if ``null``; ``finish_reason`` is one of ``stop, length, tool_calls, content_filter,
  function_call`` and is NOT nullable here. When ``logprobs`` is an object it requires both
  ``content`` and ``refusal`` (each an array or ``null``).
* ``ChatCompletionResponseMessage`` requires ``role, content, refusal``: ``refusal: null`` must be
  sent explicitly, as must ``content: null`` on a tool-call-only message. ``role`` is
  ``"assistant"``. ``tool_calls`` items are ``oneOf`` function ``{id, type: "function",
  function: {name, arguments}}`` / custom ``{id, type: "custom", custom: {name, input}}``, all
  keys required; ``arguments`` is a string.
* ``CreateChatCompletionStreamResponse``: same required top-level keys, ``object`` is
  ``"chat.completion.chunk"``. ``usage`` is optional and nullable (``null`` on every chunk except
  the last when ``include_usage`` is set). ``choices`` may be empty (the final usage chunk).
  Each choice requires ``index, delta, finish_reason``: ``finish_reason`` is nullable but must be
  present (send ``"finish_reason": null`` on non-final chunks). ``logprobs`` is optional and
  nullable (unlike the non-streaming choice). ``system_fingerprint`` and ``obfuscation`` are
  optional non-nullable strings. In ``delta`` nothing is required; ``content``/``refusal`` are
  nullable; ``role`` is one of ``developer, system, user, assistant, tool``; each
  ``tool_calls[]`` chunk requires only ``index`` (``type`` can only be ``"function"``).
* ``CompletionUsage`` requires ``prompt_tokens, completion_tokens, total_tokens`` (integers, not
  nullable). ``prompt_tokens_details`` (``cached_tokens``, ``cache_write_tokens``,
  ``audio_tokens``, ``text_tokens``, ``image_tokens``) and ``completion_tokens_details``
  (``reasoning_tokens``, ``audio_tokens``, ``text_tokens``, ``accepted_prediction_tokens``,
  ``rejected_prediction_tokens``) are optional, NOT nullable objects with no required keys; all
  their counters are integers (not nullable).
* ``ErrorResponse`` requires ``error``; ``Error`` requires ``message, type, param, code``:
  ``param`` and ``code`` must be present even when ``null``, and ``code`` is a string or ``null``
  (an integer such as ``429`` is rejected).
* ``ListModelsResponse`` requires ``object`` (``"list"``) and ``data`` (no pagination keys).
  ``Model`` requires ``id, object ("model"), created (integer), owned_by``; ``shutdown_date`` is
  an optional nullable date string.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

__all__ = ["SPEC_ENV", "components", "convert_schema", "errors", "spec_path", "validate"]

SPEC_ENV = "COURIER_OPENAI_SPEC"
DEFAULT_SPEC_PATH = (
    Path(__file__).resolve().parents[2].parent / "shared" / "spec" / "openai-openapi.yaml"
)

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_COMPOSITION = ("$ref", "allOf", "oneOf", "anyOf")
_ANNOTATIONS = frozenset({"description", "title", "example", "examples", "deprecated", "default"})
_MAX_MESSAGE = 300


def spec_path() -> Path:
    """The spec file in use: ``$COURIER_OPENAI_SPEC`` if set, else the shared copy."""
    override = os.environ.get(SPEC_ENV)
    return Path(override).expanduser().resolve() if override else DEFAULT_SPEC_PATH


def _is_bare_nullable(member: Any) -> bool:
    return (
        isinstance(member, dict)
        and member.get("nullable") is True
        and set(member) - {"nullable"} <= _ANNOTATIONS
    )


def _make_nullable(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if kind is not None and "const" not in node and not any(k in node for k in _COMPOSITION):
        kinds = kind if isinstance(kind, list) else [kind]
        if "null" not in kinds:
            node["type"] = [*kinds, "null"]
        enum = node.get("enum")
        if isinstance(enum, list) and None not in enum:
            node["enum"] = [*enum, None]
        return node
    return {"anyOf": [node, {"type": "null"}]}


def convert_schema(node: Any) -> Any:
    """Return a copy of an OpenAPI 3.0/3.1 schema tree as plain JSON Schema 2020-12.

    Only ``nullable`` and boolean ``exclusiveMinimum``/``exclusiveMaximum`` are rewritten (see the
    module docstring); everything else is copied as is. Keywords are recognised only with a
    boolean value, so a *property* named e.g. ``nullable`` (whose value is a schema) is left alone.
    """
    if isinstance(node, list):
        return [convert_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    nullable = bool(node.pop("nullable")) if isinstance(node.get("nullable"), bool) else False
    all_of = node.get("allOf")
    if isinstance(all_of, list) and any(_is_bare_nullable(m) for m in all_of):
        nullable = True
        kept = [m for m in all_of if not _is_bare_nullable(m)]
        if kept:
            node["allOf"] = kept
        else:
            del node["allOf"]
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(key), bool) and node.pop(key) and bound in node:
            node[key] = node.pop(bound)
    converted = {key: convert_schema(value) for key, value in node.items()}
    return _make_nullable(converted) if nullable else converted


@functools.cache
def _load_components(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"OpenAI OpenAPI spec not found at {file} (set {SPEC_ENV} to point at a copy)"
        )
    with file.open("rb") as fh:
        document = yaml.load(fh, Loader=_Loader)
    comps = document.get("components") if isinstance(document, dict) else None
    if not isinstance(comps, dict) or not isinstance(comps.get("schemas"), dict):
        raise ValueError(f"{file} has no components.schemas; is it an OpenAPI document?")
    converted: dict[str, Any] = convert_schema(comps)
    schemas = converted["schemas"]
    for name, schema in schemas.items():
        if isinstance(schema, dict) and schema.get("$recursiveAnchor") is True:
            schemas[name] = _resolve_recursive_ref(schema, f"#/components/schemas/{name}")
    return converted


def _resolve_recursive_ref(node: Any, target: str) -> Any:
    """Replace 2019-09 ``$recursiveRef: "#"`` (ignored by 2020-12) with ``$ref: target``."""
    if isinstance(node, list):
        return [_resolve_recursive_ref(item, target) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$recursiveAnchor" and isinstance(value, bool):
            continue
        if key == "$recursiveRef" and value == "#":
            out["$ref"] = target
        else:
            out[key] = _resolve_recursive_ref(value, target)
    return out


def components() -> dict[str, Any]:
    """The converted ``components`` of the spec in use (cached per spec path; do not mutate)."""
    return _load_components(str(spec_path()))


@functools.cache
def _validator(path: str, schema_name: str) -> Draft202012Validator:
    comps = _load_components(path)
    schemas = comps["schemas"]
    if schema_name not in schemas:
        close = difflib.get_close_matches(schema_name, list(schemas), n=5)
        hint = f"; did you mean one of {close}?" if close else ""
        raise KeyError(f"no schema {schema_name!r} in components.schemas of {path}{hint}")
    pointer = schema_name.replace("~", "~0").replace("/", "~1")
    root = {"$ref": f"#/components/schemas/{pointer}", "components": comps}
    return Draft202012Validator(root, format_checker=None)


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _describe(error: ValidationError) -> str:
    line = f"{error.json_path}: {_shorten(error.message)}"
    if error.context:  # anyOf/oneOf: say which branch came closest and why it failed
        closest = best_match(error.context)
        if closest is not None:
            line += f" (closest branch: {closest.json_path}: {_shorten(closest.message)})"
    return line


def errors(schema_name: str, instance: object) -> list[str]:
    """Every way ``instance`` violates ``components.schemas[schema_name]``, as ``path: message``.

    ``instance`` is decoded JSON (``response.json()``); it is round-tripped through ``json`` first,
    so values that cannot go on the wire (NaN, datetimes, sets) are reported as an error.
    Raises ``KeyError`` for an unknown schema name.
    """
    validator = _validator(str(spec_path()), schema_name)
    try:
        data = json.loads(json.dumps(instance, allow_nan=False))
    except (TypeError, ValueError) as exc:
        return [f"$: not serialisable as strict JSON: {exc}"]
    found = sorted(validator.iter_errors(data), key=lambda e: (e.json_path, e.message))
    return [_describe(error) for error in found]


def validate(schema_name: str, instance: object) -> None:
    """Raise ``AssertionError`` listing every error if ``instance`` does not match the schema."""
    problems = errors(schema_name, instance)
    if problems:
        listing = "\n".join(f"  - {problem}" for problem in problems)
        raise AssertionError(
            f"{len(problems)} error(s) validating against OpenAI schema {schema_name!r}:\n{listing}"
        )
