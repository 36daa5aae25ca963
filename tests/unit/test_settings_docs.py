"""docs/settings.md against the classes it documents: every field, its real default, no more.

The settings tables are where an operator learns what Courier reads; a default that drifts
from `app/config.py` (the README once showed `COURIER_UPSTREAM_MODEL`'s as "—" while it was
`gpt-4o-mini`) sends them to configure the wrong thing. Each table follows a
`<!-- settings-table: ClassName -->` marker; its first column names the setting (the
environment name for `Settings`, the TOML key for the others), its second the default:
`unset`, `required`, or the value in backticks as one would write it in the environment or
the TOML file, which is parsed with the field's own type and compared with the default.
No server: this reads a file and imports the settings classes.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from app.config import KeyConfig, PriceOverrideConfig, Profile, Settings
from tests.support.paths import REPO

DOC = REPO / "docs" / "settings.md"
DOCUMENTED: dict[str, type[BaseModel]] = {
    "Settings": Settings,
    "Profile": Profile,
    "KeyConfig": KeyConfig,
    "PriceOverrideConfig": PriceOverrideConfig,
}
_MARKER = re.compile(r"<!-- settings-table: (\w+) -->\n((?:\|.*\n?)+)")
_CODE = re.compile(r"`([^`]*)`")


def tables(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each class's rows as (name, default cell), header and rule dropped; a class may have
    several tables (the server's settings are grouped by subject)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for cls, block in _MARKER.findall(text):
        rows = []
        for line in block.strip().splitlines()[2:]:
            # A `|` inside backticks (a shell pipe in a meaning) is not a column break: only
            # the first two cells are read, and neither holds one.
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            name = _CODE.search(cells[0])
            rows.append((name.group(1) if name else cells[0], cells[1]))
        found.setdefault(cls, []).extend(rows)
    return found


def field_name(cls: str, documented: str) -> str:
    if cls == "Settings":
        return documented.removeprefix("COURIER_").lower()
    return documented


def documented_name(cls: str, field: str) -> str:
    return f"COURIER_{field.upper()}" if cls == "Settings" else field


def _empty(value: Any) -> bool:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return value is None or value in ("", ())


def default_problem(field: FieldInfo, cell: str) -> str | None:
    """Why `cell` does not state `field`'s default, or None when it does."""
    if field.is_required():
        return None if cell == "required" else f"is required, documented as {cell!r}"
    default = field.get_default(call_default_factory=True)
    if cell == "unset":
        return None if _empty(default) else f"defaults to {default!r}, documented as unset"
    code = _CODE.search(cell)
    if code is None:
        return f"default {cell!r} is neither unset, required nor a `value`"
    raw: Any = code.group(1)
    if raw.startswith(("[", "{")):
        raw = json.loads(raw)
    try:
        value = TypeAdapter(field.annotation).validate_python(raw)
    except ValidationError:
        return f"documented default {code.group(1)!r} is not a valid value"
    if value != default:
        return f"defaults to {default!r}, documented as {code.group(1)!r}"
    return None


def problems(text: str) -> list[str]:
    """Everything wrong between the doc's tables and the classes, one line each."""
    found = tables(text)
    out = [f"no table for {cls}" for cls in DOCUMENTED if cls not in found]
    for cls, rows in found.items():
        model = DOCUMENTED.get(cls)
        if model is None:
            out.append(f"a table for {cls}, which is not a settings class")
            continue
        fields = model.model_fields
        seen: set[str] = set()
        for documented, cell in rows:
            name = field_name(cls, documented)
            if name not in fields:
                out.append(f"{cls}: {documented} is documented but does not exist")
                continue
            if name in seen:
                out.append(f"{cls}: {documented} is documented twice")
            seen.add(name)
            if problem := default_problem(fields[name], cell):
                out.append(f"{cls}: {documented} {problem}")
        out += [
            f"{cls}: {documented_name(cls, name)} is not documented"
            for name in fields
            if name not in seen
        ]
    return out


def test_every_setting_is_documented_with_its_real_default() -> None:
    assert problems(DOC.read_text()) == []


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "| `COURIER_UPSTREAM_MODEL` | `gpt-4o-mini` |",
            "| `COURIER_UPSTREAM_MODEL` | unset |",
            "Settings: COURIER_UPSTREAM_MODEL defaults to 'gpt-4o-mini', documented as unset",
        ),
        (
            "| `COURIER_KEEPALIVE_S` | `5` |",
            "| `COURIER_KEEPALIVE_S` | `15` |",
            "Settings: COURIER_KEEPALIVE_S defaults to 5.0, documented as '15'",
        ),
        (
            "| `COURIER_KEEPALIVE_S` | `5` |",
            "| `COURIER_KEEPALIVE_SECONDS` | `5` |",
            "Settings: COURIER_KEEPALIVE_SECONDS is documented but does not exist",
        ),
        (
            "| `tool_cpu_s` | `600` |",
            "| `tool_cpu_s` | `ten` |",
            "Profile: tool_cpu_s documented default 'ten' is not a valid value",
        ),
        (
            "| `name` | required |",
            "| `name` | `default` |",
            "KeyConfig: name is required, documented as '`default`'",
        ),
        (
            '| `toolsets` | `["core", "web", "memory"]` |',
            '| `toolsets` | `["core", "memory"]` |',
            "Profile: toolsets defaults to ('core', 'web', 'memory'), documented as "
            '\'["core", "memory"]\'',
        ),
    ],
)
def test_a_wrong_row_is_reported(old: str, new: str, expected: str) -> None:
    text = DOC.read_text()
    assert old in text, f"the doc no longer has {old!r}: update this test's example"
    assert expected in problems(text.replace(old, new, 1))


def test_a_missing_row_is_reported() -> None:
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `COURIER_TOKEN_SECRET`"))
    assert problems(text.replace(row + "\n", "", 1)) == [
        "Settings: COURIER_TOKEN_SECRET is not documented"
    ]
