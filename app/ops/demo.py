"""`make demo`: a real agent turn end to end, through the server, with the official client.

Without a provider key in the environment it starts the built-in upstream simulator; with
`COURIER_UPSTREAM_API_KEY` (and the other `COURIER_UPSTREAM_*` names) set, it talks to
that provider instead.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from openai import OpenAI

from app.ops import ports

PROMPTS = (
    "List the files in the workspace, then read notes.txt and tell me what it says.",
    "Thanks. In one sentence, what should I do first?",
)

NOTES = """Courier demo notes
- The server runs the whole agent loop; the client only sees the answer.
- Usage comes back in four buckets: fresh input, output, cache read, cache write.
- First task: point your OpenAI client's base_url at http://127.0.0.1:8642/v1.
"""


def _free_port() -> int:
    return ports.free_port()


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"demo: the {what} exited during startup")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"demo: the {what} did not start")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _print_usage(usage: object) -> None:
    data = usage.model_dump() if hasattr(usage, "model_dump") else {}
    courier = data.get("courier") or {}
    cost = courier.get("cost") or {}
    print(
        f"\n  usage: prompt {data.get('prompt_tokens')} = fresh {courier.get('input_tokens')}"
        f" + cache read {courier.get('cache_read_tokens')}"
        f" + cache write {courier.get('cache_write_tokens')};"
        f" output {data.get('completion_tokens')};"
        f" upstream calls {courier.get('upstream_calls')};"
        f" cost {cost.get('amount_usd')} USD ({cost.get('status')}, {cost.get('source')})"
    )


def _turn(client: OpenAI, model: str, prompt: str, session_id: str | None) -> str:
    headers = {"X-Session-Id": session_id} if session_id else {}
    print(f"\nyou> {prompt}\ncourier> ", end="", flush=True)
    with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    ) as response:
        sid = response.headers.get("x-session-id", "")
        for chunk in response.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                print(chunk.choices[0].delta.content, end="", flush=True)
            if chunk.usage is not None:
                _print_usage(chunk.usage)
    return sid


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="courier-demo-"))
    workspace = workdir / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text(NOTES)
    (workspace / "todo.md").write_text("# Todo\n- try `make test`\n")
    key = "sk-courier-" + secrets.token_urlsafe(24)
    port = _free_port()
    env = {
        **os.environ,
        "COURIER_API_KEY": key,
        "COURIER_PORT": str(port),
        "COURIER_DATA_DIR": str(workdir / "data"),
        "COURIER_WORKSPACE": str(workspace),
        "COURIER_LOG_LEVEL": "warning",
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if not os.environ.get("COURIER_UPSTREAM_API_KEY"):
            sim_port = _free_port()
            sim = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.simulator",
                    "--port",
                    str(sim_port),
                    "--ttft-ms",
                    "80",
                    "--tokens-per-second",
                    "400",
                ],
            )
            procs.append(sim)
            _wait_healthy(f"http://127.0.0.1:{sim_port}/v1/models", sim, "simulator")
            env |= {
                "COURIER_UPSTREAM_BASE_URL": f"http://127.0.0.1:{sim_port}/v1",
                "COURIER_UPSTREAM_API_KEY": "simulator",
                "COURIER_UPSTREAM_MODEL": "gpt-4o-mini",
            }
            print(f"demo: no provider key set; using the built-in simulator on port {sim_port}")
        server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env)
        procs.append(server)
        _wait_healthy(f"http://127.0.0.1:{port}/health", server, "server")
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        model = client.models.list().data[0].id
        print(f"demo: courier is serving model '{model}' on http://127.0.0.1:{port}/v1")
        session_id: str | None = None
        for prompt in PROMPTS:
            session_id = _turn(client, model, prompt, session_id) or session_id
        print(f"\ndemo: done (session {session_id})")
        return 0
    finally:
        for proc in reversed(procs):
            _stop(proc)


if __name__ == "__main__":
    sys.exit(main())
