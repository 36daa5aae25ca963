"""Issue 10's benchmark runs end to end, briefly, and what it counts reads as the suite counts it.

`benchmarks/` is how the hot path's figures are shown, and nothing else runs it: a script
that rotted (a renamed helper, a simulator control that moved) would only be found the
next time somebody needed its figures. This runs `hot_path.py` with a few requests per
section (the real server and simulator, as the script starts them) and checks the figures
that are counts, not times: commits per turn as `tests/test_turn_commits.py` counts them,
and no new upstream connection after warm-up.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support.paths import REPO

ROOT = REPO
FIGURE = r"([0-9.]+|nan)"


def _hot_path(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hot_path.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run(*args: str) -> str:
    done = _hot_path(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _commits(out: str, row: str) -> float:
    found = re.search(rf"^  {re.escape(row)}\s.*commits\s+{FIGURE}", out, re.MULTILINE)
    assert found, f"no {row!r} row in:\n{out}"
    return float(found.group(1))


def test_hot_path_prints_its_sections_and_counts_what_the_suite_counts() -> None:
    # Index batches left to the first search: on a slow machine one would land inside a block
    # and add a fraction of a commit to whichever kind it fell in.
    out = _run(
        "--only", "cpu,growth,conns", "--requests", "4", "--turns", "12", "--window", "2",
        "--index-interval", "0",
    )  # fmt: skip
    assert _commits(out, "new session") == 2.0
    assert _commits(out, "continued session") == 2.0
    # A tool turn with the `todo` tool: intent, and the result with the list's change.
    assert _commits(out, "tool turn (2 upstream calls)") == 4.0
    assert re.search(rf"CPU per chunk: {FIGURE} µs", out)
    # Both growth figures of each way of continuing, and the side-by-side blocks.
    assert len(re.findall(rf"ratio {FIGURE}x\s+\(means of 5 windows each\)", out)) == 2
    paired = re.search(
        rf"alternating 2-turn blocks: turns 2-11 of a new session {FIGURE} ms\s+"
        rf"turns 13-22 of this one {FIGURE} ms\s+ratio {FIGURE}x",
        out,
    )
    assert paired, out
    connections = re.search(rf"new upstream connections per request after warm-up: {FIGURE}", out)
    assert connections and float(connections.group(1)) == 0.0, out


def test_hot_path_refuses_an_unknown_section() -> None:
    done = _hot_path("--only", "cpu,nope")
    assert done.returncode != 0
    assert "nope" in done.stdout + done.stderr
