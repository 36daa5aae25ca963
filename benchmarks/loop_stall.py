"""Does one huge request stall everybody else's stream?

Runs the real server and the simulator as subprocesses. One client streams a slow answer
(the simulator paces tokens); while it streams, another client posts a legal request with
a 10,000-message history. Printed: the longest silence between the first client's chunks
with the big request in flight, beside the same stream's longest silence alone (the
baseline, measured in the same run), and how long the big request took. Figures only.

    .venv/bin/python benchmarks/loop_stall.py [--messages 10000] [--runs 3] [--context-window N]

`--context-window 1000000` keeps the big request under the compaction threshold, so its
first call projects and encodes all 10,000 messages instead of compacting them first.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from hot_path import Rig, text_of


def _stream_gaps(rig: Rig, out: list[float]) -> None:
    """Stream one paced answer; append every gap between chunks (seconds)."""
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    last = None
    with rig.http.stream("POST", rig.url, json=body, headers=rig.auth) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            now = time.perf_counter()
            if last is not None:
                out.append(now - last)
            last = now


def _big_request(rig: Rig, messages: int, took: list[float]) -> None:
    history: list[dict[str, str]] = []
    for i in range((messages - 1) // 2):
        history.append({"role": "user", "content": f"question {i}: {text_of(1)}"})
        history.append({"role": "assistant", "content": f"answer {i}: {text_of(1)}"})
    history.append({"role": "user", "content": "and finally?"})  # the limit, exactly
    start = time.perf_counter()
    resp = rig.http.post(
        rig.url, json={"model": "courier", "messages": history}, headers=rig.auth, timeout=300
    )
    took.append(time.perf_counter() - start)
    if resp.status_code != 200:
        why = rig.control.get("/_sim/script").text[:600]
        raise SystemExit(f"the big request failed: {resp.status_code} {resp.text[:300]} {why}")


def one_run(rig: Rig, messages: int, with_big: bool) -> tuple[float, float]:
    answer = text_of(120)
    steps = [{"reply": {"text": answer}}]
    if with_big:
        # The long history may be compacted first: a summary call, then the answer.
        steps += [{"reply": {"text": "done."}}] * 3
    rig.script(steps)
    gaps: list[float] = []
    took: list[float] = []
    streamer = threading.Thread(target=_stream_gaps, args=(rig, gaps))
    streamer.start()
    time.sleep(0.5)  # the stream is under way
    if with_big:
        _big_request(rig, messages, took)
    streamer.join()
    return max(gaps) * 1000, (took[0] * 1000 if took else 0.0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--context-window", type=int, default=None)
    args = parser.parse_args()
    window = args.context_window
    rig = Rig({"COURIER_CONTEXT_WINDOW": str(window)} if window else None)
    try:
        # Scripted replies in order: the stream's answer first, then the big request's.
        rig.configure(tokens_per_second=40)
        print(
            f"load average {os.getloadavg()[0]:.1f}; {args.messages}-message request"
            + (f", {window}-token window" if window else "")
        )
        for run in range(args.runs):
            alone, _ = one_run(rig, args.messages, with_big=False)
            loaded, took = one_run(rig, args.messages, with_big=True)
            print(
                f"  run {run + 1}: longest silence in a paced stream {loaded:7.1f} ms with the "
                f"big request in flight vs {alone:6.1f} ms alone (ratio {loaded / alone:5.1f}x); "
                f"the big request took {took:7.1f} ms"
            )
    finally:
        rig.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
