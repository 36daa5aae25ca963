"""A bounded soak: a few hundred mixed turns, with tools and hostile bodies, concurrently.

Against the real server and the simulator's demo policy (which answers "list files and
read x.txt" with real list_files/read_file calls), workers send a mix of:

- tool turns naming files inside the workspace and escape attempts beside them
  (`../outside/secret.txt`, a symlink out, an absolute host path);
- plain turns continuing a session by X-Session-Id, streamed and not;
- hostile bodies: broken JSON, a 5,000-digit integer, deep nesting, 20,000 messages, an
  empty session id, a body past the size limit, a bad key, a half-sent request head.

Then it prints what must stay zero or flat: 5xx answers, escapes (the outside secret in
any answer, or any file created outside the workspace), lost rows (a session whose stored
user turns differ from the turns that got a 200), and the server's descriptor and RSS
growth between warm-up and the end. Asserts nothing (shared machines are noisy).

    .venv/bin/python benchmarks/soak.py [--turns 300] [--workers 8]
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from _harness import bench_key, free_port, start_server, start_simulator, stop, wait_http

SECRET = "SOAK-SECRET-outside-the-workspace"
URL = "/v1/chat/completions"


def _proc_stats(pid: int) -> tuple[int, int]:
    """(open descriptors, RSS in KiB) of the server process."""
    fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return fds, rss


class Soak:
    def __init__(self, base: str, key: str, port: int) -> None:
        self.base, self.key, self.port = base, key, port
        self.statuses: Counter[int] = Counter()
        self.escapes = 0
        self.sessions: dict[str, int] = {}
        """session id -> user turns that got a 200."""
        self.lock = threading.Lock()

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}", **extra}

    def record(self, resp: httpx.Response | None, text: str = "") -> None:
        with self.lock:
            self.statuses[resp.status_code if resp is not None else 0] += 1
            if SECRET in text:
                self.escapes += 1

    def tool_turn(self, client: httpx.Client) -> None:
        ask = (
            "list files, then read notes.txt and ../outside/secret.txt and "
            "trap/secret.txt and /etc/shadow.txt"
        )
        body = {"model": "courier", "messages": [{"role": "user", "content": ask}]}
        resp = client.post(URL, json=body, headers=self.headers())
        self.record(resp, resp.text)
        sid = resp.headers.get("x-session-id")
        if resp.status_code == 200 and sid:
            with self.lock:
                self.sessions[sid] = self.sessions.get(sid, 0) + 1

    def continued_turn(self, client: httpx.Client, rng: random.Random) -> None:
        with self.lock:
            known = list(self.sessions)
        sid = rng.choice(known) if known else None
        body: dict[str, Any] = {
            "model": "courier",
            "messages": [{"role": "user", "content": f"next question {rng.random()}"}],
            "stream": rng.random() < 0.5,
        }
        headers = self.headers(**({"X-Session-Id": sid} if sid else {}))
        if body["stream"]:
            with client.stream("POST", URL, json=body, headers=headers) as resp:
                text = "".join(resp.iter_text())
                self.record(resp, text)
        else:
            resp = client.post(URL, json=body, headers=headers)
            self.record(resp, resp.text)
        got = resp.headers.get("x-session-id")
        if resp.status_code == 200 and got:
            with self.lock:
                self.sessions[got] = self.sessions.get(got, 0) + 1

    def hostile(self, client: httpx.Client, rng: random.Random) -> None:
        kind = rng.choice(
            ["json", "digits", "deep", "many", "empty-sid", "big", "auth", "slow-head"]
        )
        msg = [{"role": "user", "content": "x"}]
        if kind == "slow-head":
            self.slow_head()
            return
        headers = self.headers()
        content: bytes
        if kind == "json":
            content = b'{"model": "courier", "messages": [{"role": '
        elif kind == "digits":
            content = (
                b'{"model": "courier", "messages": [{"role": "user", "content": "x"}], "n": '
                + b"7" * 5000
                + b"}"
            )
        elif kind == "deep":
            content = json.dumps({"model": "courier", "messages": msg}).encode()
            content = content[:-1] + b', "metadata": ' + b'{"a":' * 200 + b"1" + b"}" * 201
        elif kind == "many":
            many = [{"role": "user", "content": str(i)} for i in range(20_000)]
            content = json.dumps({"model": "courier", "messages": many}).encode()
        elif kind == "empty-sid":
            headers["X-Session-Id"] = ""
            content = json.dumps({"model": "courier", "messages": msg}).encode()
        elif kind == "big":
            content = b" " * (11 * 1024 * 1024)
        else:
            headers["Authorization"] = "Bearer wrong-key-0123456789"
            content = json.dumps({"model": "courier", "messages": msg}).encode()
        headers["Content-Type"] = "application/json"
        try:
            resp = client.post(URL, content=content, headers=headers)
        except httpx.HTTPError:
            self.record(None)  # the server may drop an oversized upload mid-send
            return
        self.record(resp, resp.text)

    def slow_head(self) -> None:
        """Half a request head, then silence: the server must drop us, not wait forever."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: soak\r\n")
            try:
                dropped = sock.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                dropped = True
        self.record(None if dropped else httpx.Response(599))


def _worker(soak: Soak, turns: list[str], seed: int) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=soak.base, timeout=120) as client:
        for kind in turns:
            try:
                if kind == "tool":
                    soak.tool_turn(client)
                elif kind == "chat":
                    soak.continued_turn(client, rng)
                else:
                    soak.hostile(client, rng)
            except httpx.HTTPError as exc:
                print(f"  client error on a {kind} turn: {exc!r}")
                soak.record(None)


def _lost_rows(db: Path, sessions: dict[str, int]) -> int:
    con = sqlite3.connect(db, timeout=30)
    try:
        lost = 0
        for sid, turns in sessions.items():
            (stored,) = con.execute(
                "SELECT COUNT(*) FROM message WHERE session_id = ? AND role = 'user'", (sid,)
            ).fetchone()
            # A continued turn adds one user row; a tool turn's first request one too.
            if stored != turns:
                lost += 1
        return lost
    finally:
        con.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="courier-soak-"))
    workspace, outside, data = root / "ws", root / "outside", root / "data"
    workspace.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (workspace / "notes.txt").write_text("soak notes\n")
    (workspace / "trap").symlink_to(outside, target_is_directory=True)
    sim_port, port = free_port(), free_port()
    key = bench_key()
    sim = start_simulator(sim_port)
    env = {
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": str(data),
        "COURIER_WORKSPACE": str(workspace),
        "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim_port}/v1",
        "COURIER_UPSTREAM_API_KEY": "sim",
        "COURIER_HTTP_HEADER_TIMEOUT_S": "2",
    }
    server = start_server(env, inherit_courier_env=False, log=root / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/v1/models")
        wait_http(f"http://127.0.0.1:{port}/health")
        soak = Soak(f"http://127.0.0.1:{port}", key, port)
        with httpx.Client(base_url=soak.base, timeout=60) as client:
            # Warm-up, so one-off allocations (the upstream connection pool, the parse
            # worker process for big bodies) do not read as growth.
            warm = random.Random(0)
            for _ in range(5):
                soak.tool_turn(client)
                soak.continued_turn(client, warm)
            for _ in range(8):
                soak.hostile(client, warm)
        soak.statuses.clear()
        soak.escapes = 0
        time.sleep(1)
        rng = random.Random(12)
        stats = [_proc_stats(server.pid)]
        started = time.monotonic()
        # Two equal rounds: the first fills bounded pools (upstream connections, the parse
        # worker), so growth from the first round's end to the second's is the leak signal.
        for round_turns in (args.turns // 2, args.turns - args.turns // 2):
            kinds = rng.choices(["tool", "chat", "hostile"], weights=[4, 3, 3], k=round_turns)
            shards = [kinds[i :: args.workers] for i in range(args.workers)]
            threads = [
                threading.Thread(target=_worker, args=(soak, shard, rng.randrange(1 << 30)))
                for shard in shards
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            time.sleep(3)  # let dropped connections close
            stats.append(_proc_stats(server.pid))
        elapsed = time.monotonic() - started
        (fds0, rss0), (fds1, rss1), (fds2, rss2) = stats
        outside_files = sorted(p.name for p in outside.iterdir())
        escapes = soak.escapes + (outside_files != ["secret.txt"])
        fives = sum(n for status, n in soak.statuses.items() if 500 <= status < 600)
        print(f"turns            {args.turns} in {elapsed:.1f} s with {args.workers} workers")
        print(f"statuses         {dict(sorted(soak.statuses.items()))}  (0 = dropped/no answer)")
        print(f"5xx              {fives}")
        print(f"escapes          {escapes}")
        print(f"lost rows        {_lost_rows(data / 'courier.db', soak.sessions)}")
        print(f"sessions checked {len(soak.sessions)}")
        print(f"fd growth        {fds2 - fds1:+d} over round 2  ({fds0} -> {fds1} -> {fds2})")
        growth = (rss2 - rss1) / 1024
        print(
            f"RSS growth       {growth:+.1f} MiB over round 2  "
            f"({rss0 // 1024} -> {rss1 // 1024} -> {rss2 // 1024} MiB)"
        )
        print(f"server alive     {server.poll() is None}")
    finally:
        stop(server, sim)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
