"""Structured output: check a final answer against the client's `response_format`.

The wire forwards the format natively (OpenAI `response_format`, Anthropic
`output_config.format`), but a model or a compatible server can still answer off-format;
a client calling `parse()` would then fail on our 200. So the answer is validated here,
repaired once, and otherwise refused with a clear error instead of passed on.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

from app.providers.base import OutputFormat

REPAIR_NOTE = (
    "Your previous reply did not match the required output format ({problem}). Reply again "
    "with only the JSON value that satisfies the format: no prose, no code fences."
)


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why a client's JSON schema cannot be used, or None when it is a valid schema."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return str(exc.message)
    return None


def output_problem(output: OutputFormat, text: str) -> str | None:
    """Why `text` does not satisfy `output`, in one line, or None when it does."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"not valid JSON: {exc}"
    if output.kind == "json_object":
        return None if isinstance(value, dict) else "the answer must be a JSON object"
    if output.schema is None:
        return None
    error = next(iter(Draft202012Validator(output.schema).iter_errors(value)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    return f"at {where}: {error.message}"[:500]
