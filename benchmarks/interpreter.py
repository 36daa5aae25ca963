"""CPU per request on two builds of CPython 3.11, measured side by side in the same run.

The container image runs Debian's own `python3` (Dockerfile), and `make install` builds the
venv on that interpreter where the machine has it (Makefile, `PY`): a distribution's build
is compiled with profile-guided optimisation and link-time optimisation, a source build
such as pyenv's is not unless asked. This prints what that choice is worth for Courier:
the real server (and its simulator) on this venv's interpreter and on `--other`, both
running at once, requests alternating between them so the machine's drift hits both
alike, CPU read from the process CPU clock as in benchmarks/hot_path.py. The
simulator's own CPU on each interpreter is printed too: the same comparison on code that
is not Courier's.

`--other` is a Python 3.11 executable; a venv with the runtime lock's packages is made for
it once, in the system's temporary directory (needs the package index), and reused.

Figures and ratios only; nothing is asserted (the machine is shared and noisy).

    .venv/bin/python benchmarks/interpreter.py --other ~/.pyenv/versions/3.11.7/bin/python3
                                               [--rounds 6] [--requests 100]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _harness import REPO_ROOT
from hot_path import Rig, cpu_s, text_of

LOCK = REPO_ROOT / "requirements-runtime.lock"


def describe(python: str) -> str:
    """Version and the executable a venv's `python` really is."""
    code = "import os, sys; print(sys.version.split()[0], os.path.realpath(sys._base_executable))"
    return subprocess.run(
        [python, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def venv_for(interpreter: str) -> str:
    """A venv on `interpreter` with the runtime lock installed; made once, then reused.
    The project itself is not installed: the server runs from the repository root."""
    lock = LOCK.read_bytes()
    key = hashlib.sha256(str(Path(interpreter).resolve()).encode() + lock).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"courier-bench-python-{key}"
    python = home / "bin" / "python"
    done = home / ".installed"
    if not done.exists():
        print(f"making a venv for {interpreter} in {home} (once)", flush=True)
        subprocess.run([interpreter, "-m", "venv", "--clear", str(home)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "--require-hashes", "-r", str(LOCK)], check=True)
        done.touch()
    return str(python)


def script(rig: Rig, kind: str, n: int) -> None:
    short = text_of(40)
    if kind == "tool":
        call = {"name": "todo", "arguments": {"action": "add", "items": ["check the logs"]}}
        steps: list[dict[str, Any]] = []
        for _ in range(n):
            steps += [{"reply": {"tool_calls": [call]}}, {"reply": {"text": short}}]
        rig.script(steps)
    else:
        rig.script([{"reply": {"text": short}}] * n)


def compare(rigs: dict[str, Rig], kind: str, rounds: int, n: int) -> dict[str, Any]:
    """Per round, CPU per request of each server and simulator; requests alternate."""
    server: dict[str, list[float]] = {name: [] for name in rigs}
    sim: dict[str, list[float]] = {name: [] for name in rigs}
    order = list(rigs.items())
    for _ in range(rounds):
        for rig in rigs.values():
            script(rig, kind, n)
        start = {name: (cpu_s(r.server.pid), cpu_s(r.sim.pid)) for name, r in rigs.items()}
        for i in range(n):
            for _, rig in order if i % 2 == 0 else order[::-1]:
                rig.turn()
        for name, rig in rigs.items():
            server[name].append((cpu_s(rig.server.pid) - start[name][0]) * 1000 / n)
            sim[name].append((cpu_s(rig.sim.pid) - start[name][1]) * 1000 / n)
    return {"server": server, "sim": sim}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--other", required=True, help="another Python 3.11 executable")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    pythons = {"this venv": sys.executable, "other": venv_for(args.other)}
    print(
        f"CPU per request on two interpreters ({args.rounds} rounds x {args.requests} "
        "requests of each kind, alternating between the two servers)"
    )
    for name, python in pythons.items():
        print(f"  {name:<10} {describe(python)}")
    rigs: dict[str, Rig] = {}
    try:
        for name, python in pythons.items():
            rigs[name] = Rig(python=python)
            for _ in range(10):  # warm imports, caches and the upstream connection
                rigs[name].turn()
        for kind, label in (("new", "new session"), ("tool", "tool turn")):
            got = compare(rigs, kind, args.rounds, args.requests)
            mine, other = got["server"]["this venv"], got["server"]["other"]
            ratios = sorted(a / b for a, b in zip(mine, other, strict=True))
            sims = {k: statistics.median(v) for k, v in got["sim"].items()}
            print(
                f"  {label:<12} this venv {statistics.median(mine):5.2f} ms  other "
                f"{statistics.median(other):5.2f} ms  ratio {statistics.median(ratios):.3f} "
                f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f})   simulator: this venv "
                f"{sims['this venv']:.2f} ms, other {sims['other']:.2f} ms, ratio "
                f"{sims['this venv'] / sims['other']:.3f}"
            )
    finally:
        for rig in rigs.values():
            rig.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
