"""Large tool outputs (issue 30): CPU per turn as a session fills with 40 KB tool results.

One session continued by id; every turn the model reads a 40 KB workspace file
(`read_file`) and answers, so each upstream body carries every earlier output: about 0.4 MB
at turn 5 and 2 MB at turn 40. Printed: the server's CPU per turn (user and system apart,
from /proc) over turns 3-7 and over turns 38-42, the body size at each, and their ratio:
the baseline is the same session young, in the same run. Then side by side: a young
session's turns and this one's alternate, turn by turn (medians), which the machine's drift
cannot read as growth. The issue's bound: turn 40 at most 1.3x turn 5. Figures only;
never run it with a profiler attached (py-spy's ptrace stops multiplied the system time
tenfold).

    .venv/bin/python benchmarks/tool_output.py [--turns 45]
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from hot_path import Rig, cpu_s, text_of

TICK = os.sysconf("SC_CLK_TCK")
LINE = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima\n"
CONTENT = (LINE * (40_000 // len(LINE) + 1))[:40_000]
WINDOWS = ((3, 7), (38, 42))
PAIRED = 9


def clocks(pid: int) -> tuple[float, float, float]:
    """(CPU to the nanosecond, user and system in /proc's 10 ms ticks) of `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return cpu_s(pid), int(fields[11]) / TICK, int(fields[12]) / TICK


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=45)
    args = parser.parse_args()
    rig = Rig({"COURIER_APPROVALS": "off", "COURIER_CONTEXT_WINDOW": "1000000"}, wait_s=180)
    try:
        rig.configure(context_window=4_000_000)  # no compaction: the body must grow
        write = {"name": "write_file", "arguments": {"path": "big.txt", "content": CONTENT}}
        read = {"name": "read_file", "arguments": {"path": "big.txt"}}
        answer = {"reply": {"text": text_of(40)}}
        steps = [{"reply": {"tool_calls": [write]}}, answer]
        steps += [{"reply": {"tool_calls": [read]}}, answer] * args.turns
        # Spare answers: should the window fill (a compaction's summary call), the run goes on.
        steps += [{"reply": {"tool_calls": [write]}}, answer]  # the young session's first turn
        steps += [{"reply": {"tool_calls": [read]}}, answer] * (2 + 2 * PAIRED)
        rig.script(steps + [answer] * 10)
        sid = rig.turn("write the file")
        figures: dict[tuple[int, int], tuple[float, float, float, int]] = {}
        started = (0.0, 0.0, 0.0)
        for n in range(1, args.turns + 1):
            if any(n == a for a, _ in WINDOWS):
                started = clocks(rig.server.pid)
            try:
                rig.turn(f"read it again ({n})", session=sid)
            except RuntimeError:
                failures = rig.control.get("/_sim/script").json()
                print(f"turn {n} failed; the simulator says: {failures}")
                raise
            for a, b in WINDOWS:
                if n == b:
                    ended = clocks(rig.server.pid)
                    turns = b - a + 1
                    total, user, system = (
                        (e - s) * 1000 / turns for s, e in zip(started, ended, strict=True)
                    )
                    figures[(a, b)] = (total, user, system, len(str(rig.upstream_body())))
        for (a, b), (total, user, system, size) in figures.items():
            print(
                f"turns {a:2}-{b:2}: {total:5.1f} ms CPU/turn "
                f"(user {user:.0f}, system {system:.0f} in 10 ms ticks), "
                f"upstream body {size / 1e6:.2f} MB"
            )
        early, late = (figures[w][0] for w in WINDOWS)
        print(f"ratio late/early: {late / early:.2f}x (the issue's bound: 1.3x)")
        # Side by side: windows minutes apart read the machine's drift as growth (the same
        # code measured 1.0-1.7x on a shared machine). Turn by turn, a young session (its
        # turns 3-7) and this one (its turns past 45) alternate, so drift hits both alike.
        young = rig.turn("write the file")
        for n in range(1, 3):
            rig.turn(f"read it again ({n})", session=young)
        cost: dict[str, list[float]] = {"young": [], "grown": []}
        for n in range(3, 3 + PAIRED):
            for name, session in (("grown", sid), ("young", young)):
                before = cpu_s(rig.server.pid)
                rig.turn(f"read it again ({n})", session=session)
                cost[name].append((cpu_s(rig.server.pid) - before) * 1000)
        early, late = statistics.median(cost["young"]), statistics.median(cost["grown"])
        print(
            f"side by side, medians of {PAIRED} alternating turns: a young session's turns "
            f"3-{2 + PAIRED} {early:.1f} ms, this one's {late:.1f} ms: ratio {late / early:.2f}x"
        )
    finally:
        rig.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
