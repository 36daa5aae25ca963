"""What the command guard costs per terminal call, against a naive one-regex check.

The guard runs before every command on the hot path of a tool batch; this prints its
median cost over the test table's commands beside a baseline measured in the same run
(lower-casing plus one compiled regex, the cheapest guard anyone would write), and the
cost of starting the shell it protects (`/bin/sh -c true`) for scale. No assertions.

    .venv/bin/python benchmarks/command_guard.py
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.security.command_guard import check_command
from tests.unit.test_command_guard import CASES

NAIVE = re.compile(r"rm\s+-rf\s+/|mkfs|shutdown|reboot|:\(\)\{")
ROUNDS = 20


def per_command_us(fn: object) -> float:
    commands = [c for c, _, _ in CASES]
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for command in commands:
            fn(command)  # type: ignore[operator]
        samples.append((time.perf_counter() - start) / len(commands) * 1e6)
    return statistics.median(samples)


def shell_start_us() -> float:
    samples = []
    for _ in range(10):
        start = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], check=True)
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> None:
    guard = per_command_us(lambda c: check_command(c))
    naive = per_command_us(lambda c: NAIVE.search(c.lower()))
    shell = shell_start_us()
    print(f"commands: {len(CASES)}, rounds: {ROUNDS}")
    print(f"guard (full ladder):  {guard:8.1f} us/command")
    print(f"naive one-regex:      {naive:8.1f} us/command  (guard/naive = {guard / naive:.0f}x)")
    print(f"/bin/sh -c true:      {shell:8.1f} us           (guard/shell = {guard / shell:.3f})")


if __name__ == "__main__":
    main()
