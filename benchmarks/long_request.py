"""One request carrying a long history: server CPU and time to first token, fresh and resent.

Clients resend the whole visible history each turn. Issue 30 asks that a 10,000-message
request cost well under a tenth of a second of CPU. Three cases, side by side in one run
against one server (the simulator answers each at once):

- by id: the next turn of a stored conversation as long, named by `X-Session-Id` (one new
  message: the baseline, what a continued session costs);
- resent: the same conversation resent whole with one new message (a continuation matched
  by its rolling hash, `app/agent/opening/continuity.py`);
- fresh: a 10,000-message history the server has never seen (a new session importing it).

CPU is the server process's (every thread: the big body is parsed on one) and any
children's, read from the kernel's per-process clocks around each request; the figure is
the median of `--repeats`. Printed with the ratio of each case to the by-id turn, then the
longest pause 20 paced streams saw while a fresh and a resent long request ran, beside the
same window with nothing else running.

    .venv/bin/python benchmarks/long_request.py [--messages 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from hot_path import Rig, cpu_s, has_content, text_of


def children(pid: int) -> list[int]:
    """The server's child processes, whose CPU would be the request's too (none since the
    parse worker went: big bodies are parsed on a thread)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        raw = (task / "children").read_text().split()
        found += [int(c) for c in raw]
    return found


def process_cpu_s(pid: int) -> float:
    total = cpu_s(pid)
    for child in children(pid):
        with suppress(OSError, ValueError):  # gone between listing and reading
            total += cpu_s(child)
    return total


def history(n: int, tag: str) -> list[dict[str, str]]:
    """`n` alternating user/assistant messages of ~170 bytes, unique to `tag`."""
    out: list[dict[str, str]] = []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"{tag} message {i}: {text_of(24)}"})
    return out


def timed_request(
    rig: Rig, messages: list[dict[str, str]], session: str | None = None
) -> tuple[float, float, str, str]:
    """One streamed request read to its end: (server CPU ms, seconds to the first content
    chunk, session id, the answer's text)."""
    headers = dict(rig.auth)
    if session:
        headers["X-Session-Id"] = session
    body = json.dumps({"model": "courier", "stream": True, "messages": messages}).encode()
    headers["Content-Type"] = "application/json"
    started_cpu = process_cpu_s(rig.server.pid)
    started = time.perf_counter()
    first: float | None = None
    said: list[str] = []
    with rig.http.stream("POST", rig.url, content=body, headers=headers) as resp:
        resp.raise_for_status()
        sid = resp.headers["x-session-id"]
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                chunk: dict[str, Any] = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(line)
                choices = chunk.get("choices") or [{}]
                if content := choices[0].get("delta", {}).get("content"):
                    first = first if first is not None else time.perf_counter() - started
                    said.append(content)
    cpu_ms = (process_cpu_s(rig.server.pid) - started_cpu) * 1000
    return cpu_ms, first if first is not None else float("nan"), sid, "".join(said)


BACKGROUND = 20
"""Streams running while the long request is parsed ("without silencing other streams")."""
PACE = 20
"""Their tokens per second: a chunk every 50 ms when nothing holds the loop."""


def longest_gap_ms(rig: Rig, tag: str, during: Callable[[], object] | None) -> float:
    """The longest silence between two content chunks of any of BACKGROUND paced streams,
    over a window in which `during` runs once (None: the same window, nothing else)."""
    gaps: list[float] = []
    ready = threading.Barrier(BACKGROUND + 1)
    window = threading.Event()

    def stream(i: int) -> None:
        # Unique per window: a byte-identical body would reattach to the finished turn.
        said = [{"role": "user", "content": f"background {tag} {i}"}]
        body = {"model": "courier", "stream": True, "messages": said}
        last: float | None = None
        longest = 0.0
        with (
            httpx.Client(timeout=120) as http,
            http.stream("POST", rig.url, json=body, headers=rig.auth) as resp,
        ):
            for line in resp.iter_lines():
                if not has_content(line):
                    continue
                now = time.perf_counter()
                if last is None:
                    ready.wait(60)
                elif window.is_set():
                    longest = max(longest, now - last)
                last = now
        gaps.append(longest * 1000)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(BACKGROUND)]
    for t in threads:
        t.start()
    ready.wait(60)  # every stream is flowing
    time.sleep(0.5)
    window.set()
    if during is not None:
        during()
    time.sleep(1.0)
    window.clear()
    for t in threads:
        t.join()
    return max(gaps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    # Requests stay within the server's 10,000-message cap: the resent conversation grows
    # by two messages a repeat, so it starts that much shorter (odd: it ends on a user).
    n = args.messages - 1 - 2 * (args.repeats + 1)  # and once more while others stream
    n -= 1 - n % 2
    rig = Rig(wait_s=120.0)  # a loaded machine starts the server slowly
    try:
        rig.script([{"reply": {"text": text_of(20)}}] * (4 * args.repeats + 20))
        for _ in range(3):  # warm: imports, caches
            rig.turn()
        convo = history(n, "stored")
        _, _, sid, answer = timed_request(rig, convo)
        convo.append({"role": "assistant", "content": answer})
        _, _, by_id_sid, _ = timed_request(rig, history(n, "by id"))  # as long, named
        cost: dict[str, list[float]] = {"by id": [], "resent": [], "fresh": []}
        ttft: dict[str, list[float]] = {name: [] for name in cost}
        for r in range(args.repeats):
            question = {"role": "user", "content": f"Next question {r}."}
            cpu, first, got, _ = timed_request(rig, [question], session=by_id_sid)
            assert got == by_id_sid
            cost["by id"].append(cpu)
            ttft["by id"].append(first)
            question = {"role": "user", "content": f"Resent question {r}."}
            cpu, first, got, answer = timed_request(rig, [*convo, question])
            assert got == sid, "the resent history did not continue its session"
            cost["resent"].append(cpu)
            ttft["resent"].append(first)
            convo += [question, {"role": "assistant", "content": answer}]
            cpu, first, got, _ = timed_request(rig, history(n, f"fresh {r}"))
            assert got != sid
            cost["fresh"].append(cpu)
            ttft["fresh"].append(first)
        # Other streams while the long request parses: the longest pause any of them saw.
        rig.configure(tokens_per_second=PACE)
        paced = {"reply": {"text": text_of(PACE * 6)}}  # six seconds of words
        rig.script([paced] * (3 * (BACKGROUND + 1)))
        quiet = longest_gap_ms(rig, "alone", None)
        fresh = partial(timed_request, rig, history(n, "gap fresh"))
        fresh_gap = longest_gap_ms(rig, "fresh", fresh)
        question = {"role": "user", "content": "Resent question while others stream."}
        resent_gap = longest_gap_ms(rig, "resent", partial(timed_request, rig, [*convo, question]))
        size = len(json.dumps({"messages": convo}).encode()) / 1e6
        print(
            f"One request carrying {n:,} messages (~{size:.1f} MB), "
            f"median of {args.repeats}, server CPU (all threads)"
        )
        base = statistics.median(cost["by id"])
        for name in cost:
            ms, first_ms = statistics.median(cost[name]), statistics.median(ttft[name]) * 1000
            print(
                f"  {name:<8} {ms:8.1f} ms CPU   first token {first_ms:7.1f} ms   "
                f"ratio to by id {ms / base:6.2f}x"
            )
        print(
            f"Longest pause between chunks of {BACKGROUND} streams at {PACE} tok/s: "
            f"{quiet:.0f} ms alone, {fresh_gap:.0f} ms while a fresh one ran, "
            f"{resent_gap:.0f} ms while a resent one ran"
        )
    finally:
        rig.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
