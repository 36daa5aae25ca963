"""Tool-call repair tables: names, JSON arguments, and type coercion."""

from __future__ import annotations

from typing import Any

import pytest

from app.tools.builtin import file_tools
from app.tools.call_repair import (
    EMPTY_NAME_MESSAGE,
    coerce_arguments,
    repair_json_arguments,
    resolve_tool_name,
)

KNOWN = ["list_files", "patch", "read_file", "search_files", "write_file", "web_fetch"]
CATALOG = "list_files, patch, read_file, search_files, web_fetch, write_file"

# ------------------------------------------------------------------------------ names

NAMES: list[tuple[str, str, str | None]] = [
    # (emitted, status, resolved name)
    ("read_file", "exact", "read_file"),
    ("Read_File", "repaired", "read_file"),
    ("READ_FILE", "repaired", "read_file"),
    ("read-file", "repaired", "read_file"),
    ("read file", "repaired", "read_file"),
    ("  read_file ", "repaired", "read_file"),
    ("ReadFile", "repaired", "read_file"),
    ("readFile", "repaired", "read_file"),
    ("WebFetch", "repaired", "web_fetch"),
    ("functions.read_file", "repaired", "read_file"),
    ("reed_file", "repaired", "read_file"),  # difflib, one clear best
    ("serch_files", "repaired", "search_files"),
    ("pach", "repaired", "patch"),
    ("", "empty", None),
    ("   ", "empty", None),
    ("run_shell", "unknown", None),
    ("delete_everything", "unknown", None),
    ("xyz_file", "unknown", None),  # best ratio 0.59, under the 0.7 cutoff
]


@pytest.mark.parametrize(("emitted", "status", "resolved"), NAMES)
def test_name_resolution(emitted: str, status: str, resolved: str | None) -> None:
    result = resolve_tool_name(emitted, KNOWN)
    assert result.status == status
    assert result.name == resolved
    assert result.ok == (resolved is not None)
    assert (result.message is None) == result.ok


def test_empty_and_unknown_names_get_different_replies() -> None:
    empty = resolve_tool_name("", KNOWN)
    unknown = resolve_tool_name("run_shell", KNOWN)
    # The empty name must not be fed the catalog (it sustains the imitation loop) ...
    assert empty.message == EMPTY_NAME_MESSAGE == "error: the tool call has no name"
    assert not any(name in empty.message for name in KNOWN)
    # ... while a real miss gets it, so the model can correct itself.
    assert unknown.message == f"error: unknown tool 'run_shell'; available: {CATALOG}"


def test_ambiguous_spellings_are_not_guessed() -> None:
    both = ["read_file", "ReadFile"]
    assert resolve_tool_name("read_file", both).status == "exact"
    assert resolve_tool_name("READ-FILE", both).status == "unknown"
    # Two equally close candidates (ratio 0.83 each): a tie is answered with the catalog.
    tie = resolve_tool_name("tool_c", ["tool_a", "tool_b"])
    assert tie.status == "unknown"
    assert tie.message == "error: unknown tool 'tool_c'; available: tool_a, tool_b"


def test_long_invented_names_are_not_echoed_in_full() -> None:
    result = resolve_tool_name("x" * 5000, KNOWN)
    assert result.message is not None and len(result.message) < 200


def test_unknown_with_an_empty_catalog() -> None:
    assert resolve_tool_name("a", []).message == "error: unknown tool 'a'; available: (none)"


# ------------------------------------------------------------------------------- JSON

JSON_OK: list[tuple[str, dict[str, Any]]] = [
    ('{"path": "a"}', {"path": "a"}),
    ("", {}),
    ("   ", {}),
    ('{"path": "a",}', {"path": "a"}),
    ('{"xs": [1, 2,], }', {"xs": [1, 2]}),
    ('{"s": "a,}"}', {"s": "a,}"}),  # a comma inside a string is content, not damage
    ('{"s": "a,}",}', {"s": "a,}"}),
    ('{"path": "a"', {"path": "a"}),
    ('{"path": "a', {"path": "a"}),
    ('{"xs": [1, 2', {"xs": [1, 2]}),
    ('{"o": {"xs": [1, {"k": "v', {"o": {"xs": [1, {"k": "v"}]}}),
    ('{"a": 1,', {"a": 1}),
    ('{"s": "quote \\" inside', {"s": 'quote " inside'}),
    ('```json\n{"path": "a"}\n```', {"path": "a"}),
    ('```\n{"path": "a",}\n```', {"path": "a"}),
    ('"{\\"path\\": \\"a\\"}"', {"path": "a"}),  # double-encoded object
]


@pytest.mark.parametrize(("raw", "expected"), JSON_OK)
def test_json_repairs(raw: str, expected: dict[str, Any]) -> None:
    assert repair_json_arguments(raw) == expected


JSON_BAD: list[tuple[str, str]] = [
    ("{not json", "not valid JSON"),
    ('{"a": 1]', "not valid JSON"),  # mismatched closer: damage in the middle
    ('{"a": }', "not valid JSON"),
    ('{"a": ', "not valid JSON"),
    ('{"a"', "not valid JSON"),
    ('{"s": "ends in escape \\', "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got array"),
    ('"just text"', "must be a JSON object, got string"),
    ("42", "must be a JSON object, got number"),
    ("null", "must be a JSON object, got null"),
    ('{"a": 1} trailing', "not valid JSON"),
]


@pytest.mark.parametrize(("raw", "fragment"), JSON_BAD)
def test_json_refusals(raw: str, fragment: str) -> None:
    result = repair_json_arguments(raw)
    assert isinstance(result, str) and fragment in result


def test_truncated_replies_are_not_closed_up() -> None:
    # A cut-off write_file must not become a silently truncated file.
    raw = '{"path": "a.py", "content": "def f():\\n    ret'
    assert repair_json_arguments(raw) == {"path": "a.py", "content": "def f():\n    ret"}
    refusal = repair_json_arguments(raw, truncated=True)
    assert isinstance(refusal, str) and "not valid JSON" in refusal
    assert repair_json_arguments('{"a": 1,}', truncated=True) == {"a": 1}


# --------------------------------------------------------------------------- coercion

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer"},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ids": {"type": "array", "items": {"type": "integer"}},
        "opts": {
            "type": "object",
            "properties": {"depth": {"type": "integer"}, "deep": {"type": "boolean"}},
        },
        "maybe": {"type": ["integer", "null"]},
        "text_or_null": {"type": ["string", "null"]},
        "text": {"type": "string"},
        "either": {"type": ["string", "integer"]},
        "union": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "untyped": {"description": "anything"},
    },
}

COERCIONS: list[tuple[str, Any, Any]] = [
    # (property, sent, received)
    ("n", "42", 42),
    ("n", " 42 ", 42),
    ("n", "-7", -7),
    ("n", "4.0", "4.0"),  # not an exact integer: left for the handler to report
    ("n", "4.5", "4.5"),
    ("n", "1e3", "1e3"),
    ("n", "007", "007"),
    ("n", "forty", "forty"),
    ("n", "", ""),
    ("n", 42, 42),
    ("n", True, True),  # not a string: never touched
    ("x", "4.5", 4.5),
    ("x", "42", 42),
    ("x", "-1.5e2", -150.0),
    ("x", "NaN", "NaN"),
    ("x", "inf", "inf"),
    ("flag", "true", True),
    ("flag", "False", False),
    ("flag", "TRUE", True),
    ("flag", "yes", "yes"),
    ("flag", "1", "1"),
    ("tags", '["a", "b"]', ["a", "b"]),
    ("tags", "a, b", "a, b"),
    ("tags", '{"a": 1}', '{"a": 1}'),  # valid JSON, wrong kind
    ("tags", "[broken", "[broken"),
    ("ids", '["1", "2"]', [1, 2]),  # items coerced too
    ("ids", ["3", 4], [3, 4]),
    ("opts", '{"depth": "3"}', {"depth": 3}),
    (
        "opts",
        {"depth": "2", "deep": "true", "other": "5"},
        {"depth": 2, "deep": True, "other": "5"},
    ),
    ("opts", "[1]", "[1]"),
    ("maybe", "null", None),
    ("maybe", "NULL", None),
    ("maybe", "5", 5),
    ("maybe", "five", "five"),
    ("text_or_null", "null", "null"),  # already a valid string: kept as sent
    ("text", "42", "42"),
    ("text", "null", "null"),
    ("either", "42", "42"),
    ("union", "9", 9),
    ("union", "null", None),
    ("untyped", "42", "42"),
    ("not_in_schema", "42", "42"),
]


@pytest.mark.parametrize(("prop", "sent", "received"), COERCIONS)
def test_coercion(prop: str, sent: Any, received: Any) -> None:
    result = coerce_arguments({prop: sent}, SCHEMA)
    assert result == {prop: received}
    assert type(result[prop]) is type(received)


def test_coercion_is_pure() -> None:
    args = {"opts": {"depth": "3"}, "n": "1"}
    coerce_arguments(args, SCHEMA)
    assert args == {"opts": {"depth": "3"}, "n": "1"}


def test_additional_properties_schema_is_used() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert coerce_arguments({"a": "1", "b": "x"}, schema) == {"a": 1, "b": "x"}


def test_coercion_against_a_real_tool_schema() -> None:
    tools = {t.name: t for t in file_tools()}
    args = {"pattern": "x", "max_results": "10", "regex": "false"}
    assert coerce_arguments(args, tools["search_files"].parameters) == {
        "pattern": "x",
        "max_results": 10,
        "regex": False,
    }
    patch = {"path": "a", "old_string": "1", "new_string": "2", "replace_all": "True"}
    assert coerce_arguments(patch, tools["patch"].parameters)["replace_all"] is True
    assert coerce_arguments(patch, tools["patch"].parameters)["old_string"] == "1"
