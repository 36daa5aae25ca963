"""The agent's context room stands below the turn that uses it (issue 29).

`app/agent/context/` builds one upstream request's contents; the loop, the turn's context
and the rooms above them call into it. A hook there that took the whole `TurnContext`
made the room import the turn back (an arrow running up): then no part of the context
room could be read, tested or reused without the turn and everything the turn imports.
The hooks take their parts instead (`SessionWindow`, a store and a session id).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = ROOT / "app" / "agent" / "context"


def agent_imports_outside(room: Path, root: Path = ROOT) -> list[str]:
    """Every import in `room` (any depth, type-only ones too) of an `app.agent` module
    that is not inside the room itself; `root` holds `app/`."""
    inside = ".".join(room.relative_to(root).parts)
    found = []
    for path in sorted(room.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.startswith("app.agent.") and not name.startswith(inside + "."):
                    found.append(f"{path.relative_to(root)}: {name}")
    return found


def test_the_context_room_imports_nothing_of_the_agent_above_it() -> None:
    assert agent_imports_outside(CONTEXT) == []


def test_the_check_sees_a_type_only_import_of_the_turn(tmp_path: Path) -> None:
    # The import that ran back up was under TYPE_CHECKING: the check must not skip it.
    room = tmp_path / "app" / "agent" / "context"
    room.mkdir(parents=True)
    (room / "hook.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from app.agent.context.prompt import x\n"
        "if TYPE_CHECKING:\n    from app.agent.turn_context import TurnContext\n"
    )
    assert agent_imports_outside(room, tmp_path) == [
        "app/agent/context/hook.py: app.agent.turn_context"
    ]
