"""Instructions per request, counted by callgrind: a figure this shared machine cannot blur.

CPU time on these VMs drifts by tens of percent between runs of the same code (the same
request measured 3.1 and 5.3 ms a minute apart); the number of instructions it executes
does not (the same count to a few parts in a thousand, run to run). This runs the server
and the simulator under valgrind's callgrind with instrumentation off, switches it on for
N requests of each kind, and prints the server's instructions per request (every thread,
user space only: system calls are not counted, and neither is how fast the machine runs
them) beside the simulator's for the same requests, the baseline: an upstream on the same
stack doing less work.

New messages reach the full-text index in batches (app/db/search_index.py); the batch
timer is off here and one search inside each measured block indexes the block's
messages, so the figure carries their indexing whatever the machine's speed.

Needs valgrind (Debian: `apt-get install valgrind`); about a minute per kind.

    .venv/bin/python benchmarks/instructions.py [--requests 60] [--only new,continued,tool,long]
        [--resent-growth 300]   (also: a resent conversation's turns past 300 beside a young one's)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hot_path import Rig, text_of

KINDS = ("new", "continued", "tool", "long")
SHORT, LONG = 40, 400


def callgrind(out: Path, name: str) -> tuple[str, ...]:
    return (
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # the imports and startup are not the figure
        f"--callgrind-out-file={out}/{name}.%p",
        "--dump-instr=no",
    )


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def counted(out: Path, name: str, pid: int) -> int:
    """The instructions of the newest dump of process `pid`."""
    newest = max(out.glob(f"{name}.{pid}.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
    for line in newest.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {newest}")


def measure(rig: Rig, out: Path, n: int, run: Callable[[], None]) -> tuple[float, float]:
    """(server, simulator) instructions per request over `n` runs of `run`."""
    pids = {"server": rig.server.pid, "simulator": rig.sim.pid}
    for pid in pids.values():
        control("--zero", str(pid))
        control("--instr=on", str(pid))
    for _ in range(n):
        run()
    search(rig)  # indexes the block's messages (the batch timer is off): the turns' cost
    figures = []
    for name, pid in pids.items():
        control("--instr=off", str(pid))
        control("--dump", str(pid))
        figures.append(counted(out, name, pid) / n)
    return figures[0], figures[1]


def search(rig: Rig) -> None:
    url = f"http://127.0.0.1:{rig.port}/v1/sessions/search"
    rig.http.get(url, params={"q": "nothingmatchesthis"}, headers=rig.auth).raise_for_status()


def script(rig: Rig, kind: str, n: int) -> None:
    if kind == "tool":
        call = {"name": "todo", "arguments": {"action": "add", "items": ["check the logs"]}}
        steps: list[dict[str, Any]] = []
        for _ in range(n):
            steps += [{"reply": {"tool_calls": [call]}}, {"reply": {"text": text_of(SHORT)}}]
        rig.script(steps)
    else:
        words = LONG if kind == "long" else SHORT
        rig.script([{"reply": {"text": text_of(words)}}] * n)


def resent_growth(rig: Rig, out: Path, turns: int, n: int) -> None:
    """Instructions per request of a conversation resent whole each turn, as clients do:
    `n` turns past `turns` beside `n` turns of a young one (its turns 2 on), so the growth
    issue 30 bounds (1.25x) reads without the machine's drift."""
    rig.script([{"reply": {"text": text_of(SHORT)}}] * (turns + 2 * n + 10))

    def resender(tag: str) -> Callable[[], None]:
        history: list[dict[str, str]] = []

        def resend() -> None:
            history.append({"role": "user", "content": f"{tag} question {len(history)}"})
            history.append({"role": "assistant", "content": rig.converse(history)[1]})

        return resend

    grown, young = resender("Grown"), resender("Young")
    for _ in range(turns):
        grown()
    young()
    counted = {
        name: measure(rig, out, n, turn) for name, turn in (("young", young), ("grown", grown))
    }
    (y, y_sim), (g, g_sim) = counted["young"], counted["grown"]
    print(
        f"  resent, turns 2-{n + 1} of a new conversation {y / 1e6:7.3f} M (simulator "
        f"{y_sim / 1e6:6.3f} M); turns {turns + 1}-{turns + n} of a grown one "
        f"{g / 1e6:7.3f} M (simulator {g_sim / 1e6:6.3f} M): ratio {g / y:5.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--only", default=",".join(KINDS))
    parser.add_argument(
        "--resent-growth",
        type=int,
        default=0,
        metavar="TURNS",
        help="also count a resent conversation's turns past TURNS beside a young one's",
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("needs valgrind and callgrind_control (Debian: apt-get install valgrind)")
        return 2
    kinds = [k for k in args.only.split(",") if k]
    out = Path(tempfile.mkdtemp(prefix="courier-callgrind-"))
    rig = Rig(
        {"COURIER_SEARCH_INDEX_INTERVAL_S": "0"},
        prefix=callgrind(out, "server"),
        sim_prefix=callgrind(out, "simulator"),
        wait_s=600,
    )
    n = args.requests
    print(f"Instructions per request (callgrind, {n} requests of each kind, after warm-up)")
    results: dict[str, tuple[float, float]] = {}
    try:
        for _ in range(5):
            rig.turn()
        sessions = [rig.turn() for _ in range(10)]
        search(rig)  # its first use (imports, the index's first query) is not the figure
        for kind in kinds:
            script(rig, kind, n + 3)
            for i in range(3):  # warm this kind's paths before counting
                rig.turn(session=sessions[i] if kind == "continued" else None)
            turns = iter(range(n))

            def one(kind: str = kind, turns: Iterator[int] = turns) -> None:
                i = next(turns)
                rig.turn(session=sessions[i % len(sessions)] if kind == "continued" else None)

            server, sim = results[kind] = measure(rig, out, n, one)
            label = {
                "new": "new session",
                "continued": "continued session",
                "tool": "tool turn (2 upstream calls)",
                "long": f"new session, {LONG} chunks",
            }[kind]
            print(
                f"  {label:<30} {server / 1e6:7.3f} M   (simulator {sim / 1e6:6.3f} M, "
                f"ratio {server / sim:5.2f}x)"
            )
        if args.resent_growth:
            resent_growth(rig, out, args.resent_growth, n)
    finally:
        rig.close()
        shutil.rmtree(out, ignore_errors=True)
    if "new" in results and "long" in results:
        chunk = (results["long"][0] - results["new"][0]) / (LONG - SHORT)
        sim_chunk = (results["long"][1] - results["new"][1]) / (LONG - SHORT)
        print(
            f"  per chunk                      {chunk / 1e3:7.1f} K   (simulator "
            f"{sim_chunk / 1e3:6.1f} K, ratio {chunk / sim_chunk:5.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
