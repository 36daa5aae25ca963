"""Schema-shaped answers, so the demo policy can satisfy structured-output requests.

Clients ask for JSON in three ways (OpenAI `response_format`, Anthropic native output
formats, or a forced tool carrying the schema). A simulated model answering prose to any of
them would make every structured-output path fail on the simulator instead of exercising
the server's handling, so the demo answers with a minimal instance of the schema
(strings "simulated", numbers 1 unless a bound says otherwise).
"""

from __future__ import annotations

from typing import Any

_MAX_DEPTH = 12


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    # Only local refs (`#/$defs/X`, `#/definitions/X`): what pydantic and zod emit.
    if not ref.startswith("#/"):
        return {}
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node


def _string(schema: dict[str, Any]) -> str:
    length = int(schema.get("minLength") or 0)
    text = "simulated"
    return text if len(text) >= length else text + "x" * (length - len(text))


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    if isinstance(low, int | float) and not isinstance(low, bool):
        value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        return int(value) if integer else value
    return 1


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return {}
    # Every property, not only the required ones: strict schemas require all of them anyway.
    return {name: _instance(sub, root, depth + 1) for name, sub in properties.items()}


def _array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> list[Any]:
    count = int(schema.get("minItems") or 0)
    items = schema.get("items")
    return [_instance(items if isinstance(items, dict) else {}, root, depth + 1)] * count


def _instance(schema: Any, root: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        return _instance(_resolve(str(schema["$ref"]), root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            # Prefer a non-null branch, so Optional[X] yields an X.
            chosen = next((o for o in options if o != {"type": "null"}), options[0])
            return _instance(chosen, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, depth)
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return {}


def schema_instance(schema: Any) -> Any:
    """A small value valid against `schema` (the JSON Schema subset structured output uses)."""
    root = schema if isinstance(schema, dict) else {}
    return _instance(root, root, 0)
