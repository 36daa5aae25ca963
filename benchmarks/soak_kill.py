"""kill -9 soak: scripted tool-using turns, the server killed at random moments and
restarted each time; then the durable state is checked and the counts printed.

Every tool call writes a marker file (`write_file`), so a side effect is visible on disk
after the kill. Checked at the end, with the server restarted once more:

* every marker file has its assistant intent row (persist before act);
* no acknowledged answer (a 200 the client received) is missing from the log;
* every session's next request is a valid transcript (the simulator rejects unanswered
  tool calls exactly as the real API does);
* no lease is left held, and `PRAGMA integrity_check` says ok;
* every acknowledged idempotent request replays byte-identical, from the database.

Small counts run under `make test` (tests/test_soak_kill.py); larger ones by hand:
`python benchmarks/soak_kill.py --kills 200`. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _harness as harness
import httpx

URL = "/v1/chat/completions"


def _script(steps: int) -> list[dict[str, Any]]:
    """Alternating tool and answer steps; a turn a kill cut off leaves the order shifted,
    which only changes what the next turn does, never whether it is valid."""
    out: list[dict[str, Any]] = []
    for i in range(steps):
        call = {
            "name": "write_file",
            "arguments": {"path": f"markers/m{i}.txt", "content": f"intent {i}"},
            "id": f"call_soak_{i}",
        }
        out.append({"reply": {"text": f"Writing marker {i}.", "tool_calls": [call]}})
        out.append({"reply": {"text": f"Answer {i}."}})
    return out


class Soak:
    def __init__(self, data: Path, workspace: Path, sim_url: str) -> None:
        self.key = harness.bench_key()
        self.port = harness.free_port()
        self.data = data
        self.env = {
            "COURIER_API_KEY": self.key,
            "COURIER_PORT": str(self.port),
            "COURIER_DATA_DIR": str(data),
            "COURIER_WORKSPACE": str(workspace),
            "COURIER_UPSTREAM_PROVIDER": "openai",
            "COURIER_UPSTREAM_BASE_URL": f"{sim_url}/v1",
            "COURIER_UPSTREAM_API_KEY": "sim-upstream-key",
            "COURIER_UPSTREAM_MODEL": "gpt-4o-mini",
            "COURIER_UPSTREAM_RETRY_BASE_DELAY_S": "0.01",
            "COURIER_DRAIN_TIMEOUT_S": "1",
        }
        self.base = f"http://127.0.0.1:{self.port}"
        self.acked: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
        """(request body, idempotency key, response body) for every 200 received."""
        self.sent = 0

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **extra}

    def start(self) -> Any:
        proc = harness.start_server(self.env, inherit_courier_env=False)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/health", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                time.sleep(0.05)
        harness.stop(proc)
        raise SystemExit("the server did not start")

    def ask(self, n: int, session: str | None) -> None:
        body = {"model": "courier", "messages": [{"role": "user", "content": f"task {n}"}]}
        key = f"soak-{n}"
        extra = {"Idempotency-Key": key, **({"X-Session-Id": session} if session else {})}
        self.sent += 1
        try:
            resp = httpx.post(f"{self.base}{URL}", json=body, headers=self.headers(**extra))
        except httpx.HTTPError:
            return  # killed under us
        if resp.status_code == 200:
            self.acked.append((body, key, resp.json() | {"_session": resp.headers["x-session-id"]}))

    def sessions(self) -> list[str]:
        return [r[0] for r in self.query("SELECT id FROM session WHERE profile = 'courier'")]

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        con = sqlite3.connect(self.data / "courier.db")
        try:
            return list(con.execute(sql, args))
        finally:
            con.close()


def run(kills: int, seed: int) -> int:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="soak-kill-"))
    workspace = root / "ws"
    workspace.mkdir()
    sim_port = harness.free_port()
    sim = harness.start_simulator(sim_port)
    sim_url = f"http://127.0.0.1:{sim_port}"
    problems: list[str] = []
    try:
        harness.wait_http(f"{sim_url}/v1/models")
        httpx.post(f"{sim_url}/_sim/script", json=_script(kills * 6 + 50)).raise_for_status()
        # Paced output, so a kill lands inside streams as well as inside tool calls.
        httpx.post(f"{sim_url}/_sim/config", json={"ttft_ms": 40, "tokens_per_second": 200})
        soak = Soak(root / "data", workspace, sim_url)
        n = 0
        for _ in range(kills):
            proc = soak.start()
            known = soak.sessions()
            threads = []
            for _ in range(2):
                session = rng.choice([*known, None]) if known else None
                known = [s for s in known if s != session]  # one turn per session at once
                threads.append(threading.Thread(target=soak.ask, args=(n, session)))
                n += 1
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.05, 0.8))
            proc.kill()
            proc.wait(10)
            for t in threads:
                t.join(10)
        proc = soak.start()
        try:
            problems += check(soak, workspace)
        finally:
            harness.stop(proc)
        print(f"kills: {kills}")
        print(f"requests sent: {soak.sent}, acknowledged: {len(soak.acked)}")
        print(f"marker files: {len(list((workspace / 'markers').glob('*.txt')))}")
        print(f"sessions: {len(soak.sessions())}")
    finally:
        harness.stop(sim)
    for problem in problems:
        print(f"FAIL: {problem}")
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def check(soak: Soak, workspace: Path) -> list[str]:
    problems: list[str] = []
    calls = " ".join(
        r[0] for r in soak.query("SELECT tool_calls FROM message WHERE role = 'assistant'") if r[0]
    )
    for marker in sorted((workspace / "markers").glob("*.txt")):
        step = marker.stem.removeprefix("m")
        if f'"call_soak_{step}"' not in calls:
            problems.append(f"marker {marker.name} has no assistant intent row")
    for _body, key, resp in soak.acked:
        # The answer joins the turn's texts; its last assistant row closes it.
        content = resp["choices"][0]["message"]["content"] or ""
        rows = soak.query(
            "SELECT content FROM message WHERE session_id = ? AND role = 'assistant' "
            "AND content IS NOT NULL",
            resp["_session"],
        )
        if not any(row[0] and content.endswith(row[0]) for row in rows):
            problems.append(f"acknowledged answer of {key} missing from the log")
    if (held := soak.query("SELECT COUNT(*) FROM session WHERE lease IS NOT NULL")[0][0]) != 0:
        problems.append(f"{held} lease(s) held with no turn running")
    if (ok := soak.query("PRAGMA integrity_check")[0][0]) != "ok":
        problems.append(f"integrity_check: {ok}")
    for body, key, resp in soak.acked:
        again = httpx.post(
            f"{soak.base}{URL}", json=body, headers=soak.headers(**{"Idempotency-Key": key})
        )
        expected = {k: v for k, v in resp.items() if k != "_session"}
        if again.status_code != 200 or again.json() != expected:
            problems.append(f"replay of {key} differs: {again.status_code} {again.text[:200]}")
    for sid in soak.sessions():
        nxt = httpx.post(
            f"{soak.base}{URL}",
            json={"model": "courier", "messages": [{"role": "user", "content": "next"}]},
            headers=soak.headers(**{"X-Session-Id": sid}),
            timeout=30,
        )
        if nxt.status_code != 200:
            problems.append(f"session {sid}: next request {nxt.status_code} {nxt.text[:200]}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    return run(args.kills, args.seed)


if __name__ == "__main__":
    sys.exit(main())
