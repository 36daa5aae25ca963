"""The hot path's shortcuts, where only a fresh interpreter shows them: a session row read
before any ORM mapper is configured (the in-process checks are in tests/unit/)."""

from __future__ import annotations

import subprocess
import sys


def test_a_loader_style_session_row_is_whole_in_a_fresh_process() -> None:
    """The first thing a process does with the ORM may be a session read: the row must
    behave like a constructed one even before any mapper has been configured."""
    script = (
        "from app.db.models import SessionRow\n"
        "from app.db.turn_sql import SESSION_DEFAULTS, session_row\n"
        "values = {**SESSION_DEFAULTS, 'id': 's', 'owner': 'o', 'profile': 'p',\n"
        "          'system_prompt': 'x', 'started_at': 1.0, 'updated_at': 2.0}\n"
        "row = session_row(values)\n"
        "row.input_tokens += 3\n"
        "built = SessionRow(**values)\n"
        "built.input_tokens += 3\n"
        "assert row.model_dump() == built.model_dump(), (row, built)\n"
        "print(row.id, row.input_tokens)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["s", "3"]
