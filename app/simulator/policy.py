"""Demo policy: deterministic agent behaviour when no script is loaded.

* Latest message from the user, tools offered: mentions of listing / files / directory /
  workspace call `list_files {"path": "."}`; each file name like `name.ext` calls
  `read_file {"path": name}` (all in one assistant message).
* Latest message a tool result: prose summarising the latest group of results.
* Anything else: one sentence echoing the user's question.
* `tool_choice` naming a tool: a call to it, arguments a minimal instance of its schema.
* An answer that must be JSON (`response_format`, a native output format): a minimal
  instance of the schema, or `{"answer": <the echo sentence>}` for plain JSON mode.
"""

from __future__ import annotations

import json
import re
from typing import Any

from app.simulator.request import SimRequest, ToolResult
from app.simulator.script import Reply, ToolCallSpec
from app.simulator.structured import schema_instance

_LIST_WORDS = re.compile(
    r"\b(list|listing|ls|files|directory|directories|folder|workspace)\b", re.I
)
# The extension must start with a letter, so "3.14" and version numbers are not file names.
_FILE_NAME = re.compile(
    r"(?<![\w/.-])((?:\.{0,2}/)?(?:[\w-]+/)*[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7})\b"
)
_NOT_FILES = {"e.g", "i.e", "etc"}
_QUOTE_CHARS = 200
_MAX_ENTRIES = 20


def _clip(text: str, limit: int = _QUOTE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _file_names(text: str) -> list[str]:
    names = [m.group(1) for m in _FILE_NAME.finditer(text)]
    unique = dict.fromkeys(n for n in names if n.lower() not in _NOT_FILES)
    return list(unique)


def _arguments(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


def _tool_calls(request: SimRequest) -> list[ToolCallSpec]:
    offered = set(request.tool_names)
    text = request.last_user_text
    calls: list[ToolCallSpec] = []
    if "list_files" in offered and _LIST_WORDS.search(text):
        calls.append(ToolCallSpec("list_files", _arguments({"path": "."})))
    if "read_file" in offered:
        for name in _file_names(text):
            calls.append(ToolCallSpec("read_file", _arguments({"path": name})))
    return calls


def _entry_name(entry: Any) -> str:
    if isinstance(entry, dict):
        return str(entry.get("name") or entry.get("path") or json.dumps(entry))
    return str(entry)


def _entries(content: str) -> list[str]:
    """File names from a listing, whether it is JSON or one entry per line."""
    try:
        parsed = json.loads(content)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        parsed = next(
            (parsed[k] for k in ("entries", "files", "items") if isinstance(parsed.get(k), list)),
            None,
        )
    if isinstance(parsed, list):
        return [_entry_name(entry) for entry in parsed]
    lines = (line.strip().lstrip("-*• ").strip() for line in content.splitlines())
    return [line for line in lines if line]


def _listing(entries: list[str]) -> str:
    if not entries:
        return "The workspace is empty."
    shown = ", ".join(entries[:_MAX_ENTRIES])
    more = len(entries) - _MAX_ENTRIES
    return f"The workspace contains: {shown}" + (f" and {more} more." if more > 0 else ".")


def _argument(result: ToolResult, key: str) -> str | None:
    try:
        value = json.loads(result.arguments).get(key)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _summary(result: ToolResult) -> str:
    name = result.tool_name or "tool"
    if result.is_error:
        return f"The {name} call failed: {_clip(result.content)}"
    if name == "list_files":
        return _listing(_entries(result.content))
    if name == "read_file":
        path = _argument(result, "path") or "file"
        return f'The file {path} begins: "{_clip(result.content)}"'
    return f"The {name} tool returned: {_clip(result.content)}"


def _as_json(schema: dict[str, Any], prose: str) -> str:
    # `{}` is plain JSON mode (`json_object`): any object will do.
    value = schema_instance(schema) if schema else {"answer": prose}
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _forced_call(request: SimRequest) -> Reply | None:
    name = request.forced_tool
    if name is None or request.tools_disabled or name not in request.tool_names:
        return None
    arguments = schema_instance(request.tool_parameters.get(name) or {})
    if not isinstance(arguments, dict):
        arguments = {}
    return Reply(tool_calls=(ToolCallSpec(name, _arguments(arguments)),))


def demo_reply(request: SimRequest) -> Reply:
    reply = _prose_or_calls(request)
    if request.output_schema is not None and reply.text is not None:
        return Reply(text=_as_json(request.output_schema, reply.text))
    return reply


def _prose_or_calls(request: SimRequest) -> Reply:
    forced = _forced_call(request)
    if forced is not None:
        return forced
    if request.last_role == "tool" and request.last_tool_results:
        return Reply(text=" ".join(_summary(r) for r in request.last_tool_results))
    if request.last_role == "user" and request.has_tools and not request.tools_disabled:
        calls = _tool_calls(request)
        if calls:
            return Reply(tool_calls=tuple(calls))
    question = _clip(request.last_user_text)
    if not question:
        return Reply(text="Hello from the Courier simulator.")
    return Reply(
        text=f'You asked: "{question}". This is a simulated answer from Courier\'s upstream.'
    )
