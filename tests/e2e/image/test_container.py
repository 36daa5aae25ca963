"""The container image, run for real with podman (`make image-test` builds it and runs this).

One network namespace, owned by the simulator's container, holds both servers: the
simulator stands in for the upstream at 127.0.0.1:8643 inside it, and both ports are
published on the host's loopback only. Without COURIER_IMAGE (an ordinary `pytest` run)
the module is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from app.ops import ports
from tests.support.paths import REPO

IMAGE = os.environ.get("COURIER_IMAGE", "")
if not IMAGE:
    pytest.skip("container checks: run `make image-test`", allow_module_level=True)

PODMAN = ["podman", "--runtime", "runc"]
KEY = "image-test-key-" + uuid.uuid4().hex
UID = 10001
SANDBOX_MARKER = "sandboxed-" + uuid.uuid4().hex[:8]


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def free_port() -> int:
    # Not a bare bind to port 0: see app/ops/ports.py (a port a container mapping holds).
    return ports.free_port()


def wait_healthy(url: str, container: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never answered:\n{logs(container)}")


def logs(container: str) -> str:
    result = podman("logs", container, check=False)
    return result.stdout + result.stderr


@dataclass
class Pod:
    """The simulator container (owning the network) and the Courier container beside it."""

    name: str
    api_port: int
    sim_port: int
    volume: str
    key_file: Path
    extra: tuple[str, ...] = ()

    @property
    def courier(self) -> str:
        return f"{self.name}-courier"

    @property
    def sim(self) -> str:
        return f"{self.name}-sim"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start_sim(self) -> None:
        podman(
            "run", "-d", "--name", self.sim,
            "-p", f"127.0.0.1:{self.api_port}:8642", "-p", f"127.0.0.1:{self.sim_port}:8643",
            IMAGE, "python3", "-m", "app.simulator", "--host", "0.0.0.0", "--port", "8643",
        )  # fmt: skip
        wait_healthy(f"http://127.0.0.1:{self.sim_port}/_sim/script", self.sim)

    def start_courier(self, *extra: str) -> None:
        podman(
            # --read-only as in deploy/docker-compose.yml: /data and /tmp the only writable paths
            "run", "-d", "--name", self.courier, "--network", f"container:{self.sim}",
            "--read-only", "--tmpfs", "/tmp",
            "-v", f"{self.volume}:/data",
            "-v", f"{self.key_file}:/run/secrets/courier_api_key:ro",
            "-e", "COURIER_API_KEY_FILE=/run/secrets/courier_api_key",
            "-e", "COURIER_UPSTREAM_BASE_URL=http://127.0.0.1:8643/v1",
            "-e", "COURIER_UPSTREAM_API_KEY=sim-upstream-key",
            "-e", "COURIER_UPSTREAM_RETRY_BASE_DELAY_S=0.01",
            *self.extra, *extra, IMAGE,
        )  # fmt: skip
        wait_healthy(f"{self.base_url}/health", self.courier)

    def script(self, steps: list[dict[str, Any]]) -> None:
        r = httpx.post(f"http://127.0.0.1:{self.sim_port}/_sim/script", json=steps, timeout=10)
        assert r.status_code == 200, r.text

    def sim_requests(self) -> list[dict[str, Any]]:
        r = httpx.get(f"http://127.0.0.1:{self.sim_port}/_sim/requests", timeout=10)
        return r.json()  # type: ignore[no-any-return]

    def sim_done(self) -> None:
        status = httpx.get(f"http://127.0.0.1:{self.sim_port}/_sim/script", timeout=10).json()
        assert status == {"remaining": 0, "failures": []}, status

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.courier, *command, check=False)

    def remove(self) -> None:
        # One at a time, Courier first: in a single `podman rm` the simulator is refused while
        # Courier still shares its network, and a leaked simulator keeps its published ports
        # (DNAT rules) for good, where a later free port can land (app/ops/ports.py).
        podman("rm", "-f", "-t", "2", self.courier, check=False)
        podman("rm", "-f", "-t", "2", self.sim)


def make_pod(tmp_path: Path, tag: str, *extra: str) -> Pod:
    key_file = tmp_path / f"key-{tag}"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o644)  # read by uid 10001 in the container; the directory guards it
    name = f"courier-it-{tag}-{uuid.uuid4().hex[:6]}"
    return Pod(name, free_port(), free_port(), f"{name}-data", key_file, extra)


@pytest.fixture(scope="module")
def pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    p = make_pod(tmp_path_factory.mktemp("pod"), "default")
    try:
        p.start_sim()
        p.start_courier()
        yield p
    finally:
        p.remove()
        podman("volume", "rm", "-f", p.volume, check=False)


def client(pod: Pod) -> OpenAI:
    return OpenAI(base_url=f"{pod.base_url}/v1", api_key=KEY, max_retries=0)


def streamed_turn(pod: Pod, content: str, session: str | None = None) -> tuple[str, str]:
    """(text, session id) of one streamed turn through the official SDK."""
    headers = {"X-Session-Id": session} if session else {}
    with client(pod).chat.completions.with_streaming_response.create(
        model="courier",
        messages=[{"role": "user", "content": content}],
        stream=True,
        extra_headers=headers,
    ) as response:
        sid = response.headers["x-session-id"]
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )
    return text, sid


# -- the checks ---------------------------------------------------------------------------


def test_health_and_the_healthcheck(pod: Pod) -> None:
    assert httpx.get(f"{pod.base_url}/health", timeout=5).json() == {"status": "ok"}
    podman("healthcheck", "run", pod.courier)  # the image's HEALTHCHECK command passes
    inspect = json.loads(podman("image", "inspect", IMAGE).stdout)[0]
    config = inspect["Config"]
    assert inspect["Healthcheck"]["Test"][0] == "CMD"  # kept: built with --format docker
    assert config["StopSignal"] == "SIGTERM"
    assert config["User"] == "courier"
    assert "/data" in config["Volumes"]
    # No secret is baked in: nothing key-like in the image's environment.
    assert not [e for e in config["Env"] if "KEY" in e.split("=")[0]]


def test_runs_as_the_fixed_non_root_uid(pod: Pod) -> None:
    status = pod.exec("cat", "/proc/1/status").stdout
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1:] == [str(UID)] * 4
    assert pod.exec("id", "-u").stdout.strip() == str(UID)


def test_the_code_is_not_writable(pod: Pod) -> None:
    targets = ("/opt/courier/app/cli.py", "/opt/courier/app/new.py", "/opt/courier/venv/x")
    for target in targets:
        # The pod runs --read-only (as compose does): refused by the mount or the mode...
        result = pod.exec("sh", "-c", f"echo x >> {target}")
        assert result.returncode != 0, target
        assert "Read-only file system" in result.stderr or "Permission denied" in result.stderr
        # ...and without it the service user still may not write: ownership, not the mount.
        plain = podman("run", "--rm", IMAGE, "sh", "-c", f"echo x >> {target}", check=False)
        assert plain.returncode != 0 and "Permission denied" in plain.stderr, target
    owner = pod.exec("stat", "-c", "%u %a", "/opt/courier/app/cli.py").stdout.split()
    assert owner[0] == "0" and not int(owner[1], 8) & 0o022


def test_the_key_is_not_in_the_process_environment(pod: Pod) -> None:
    environ = pod.exec("cat", "/proc/1/environ").stdout
    assert KEY not in environ and "COURIER_API_KEY_FILE" in environ
    r = httpx.get(f"{pod.base_url}/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401


def test_a_streamed_turn_runs_the_terminal_in_bubblewrap_and_survives_restarts(pod: Pod) -> None:
    command = (
        f"echo {SANDBOX_MARKER}; id -u; pwd; "
        "test -e /opt/courier && echo code-visible || echo code-hidden; "
        "ls /data 2>&1 | head -1; ls -A /proc | wc -l"
    )
    pod.script(
        [
            {
                "expect": {"last_user_contains": "run it"},
                "reply": {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]},
            },
            {
                "expect": {"last_tool_result_contains": SANDBOX_MARKER},
                "reply": {"text": "ran in the sandbox"},
            },
        ]
    )
    text, session = streamed_turn(pod, "run it")
    assert text == "ran in the sandbox"
    pod.sim_done()
    body = json.loads(pod.sim_requests()[-1]["body"])
    result = next(m for m in body["messages"] if m["role"] == "tool")["content"]
    # Inside bwrap: the sandbox's own uid and /workspace, no code, no data dir, no processes.
    assert result.splitlines() == [
        "exit code: 0",
        SANDBOX_MARKER,
        "1000",
        "/workspace",
        "code-hidden",
        "ls: cannot access '/data': No such file or directory",
        "0",
    ], result
    startup = logs(pod.courier)
    assert "reduced one" in startup and "unmask=ALL" in startup

    # Data survives a restart of the container, and its replacement by a new one.
    podman("restart", "-t", "10", pod.courier)
    wait_healthy(f"{pod.base_url}/health", pod.courier)
    assert_session_kept(pod, session)
    podman("rm", "-f", "-t", "10", pod.courier)
    pod.start_courier()
    assert_session_kept(pod, session)
    pod.script([{"expect": {"last_user_contains": "again"}, "reply": {"text": "still here"}}])
    assert streamed_turn(pod, "again", session) == ("still here", session)
    pod.sim_done()
    # Every earlier message was replayed from the stored log after the restarts.
    replayed = json.loads(pod.sim_requests()[-1]["body"])["messages"]
    assert [m["role"] for m in replayed if m["role"] != "system"] == [
        "user", "assistant", "tool", "assistant", "user",
    ]  # fmt: skip


def assert_session_kept(pod: Pod, session: str) -> None:
    r = httpx.get(
        f"{pod.base_url}/v1/sessions/{session}/usage",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text


def test_doctor_passes_inside_the_container(pod: Pod) -> None:
    result = pod.exec("courier", "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok    bind: 0.0.0.0:8642 inside a container" in result.stdout
    assert "warn  sandbox: bubblewrap runs, reduced" in result.stdout
    assert KEY not in result.stdout


def test_json_logs_hold_no_key(pod: Pod) -> None:
    lines = [line for line in logs(pod.courier).splitlines() if line.startswith("{")]
    assert lines and all(KEY not in line for line in lines)
    assert any(json.loads(line).get("request_id") for line in lines)


def test_the_documented_options_give_the_full_sandbox(tmp_path: Path) -> None:
    p = make_pod(
        tmp_path, "full", "--security-opt", "unmask=ALL", "--security-opt", "seccomp=unconfined"
    )
    try:
        p.start_sim()
        p.start_courier()
        assert "reduced one" not in logs(p.courier)
        p.script(
            [
                {"reply": {"tool_calls": [{"name": "terminal", "arguments": {
                    "command": "hostname; ls /proc/self/status"}}]}},
                {"expect": {"last_tool_result_contains": "courier-sandbox"},
                 "reply": {"text": "done"}},
            ]
        )  # fmt: skip
        assert streamed_turn(p, "go")[0] == "done"
        p.sim_done()
    finally:
        p.remove()
        podman("volume", "rm", "-f", p.volume, check=False)


def test_compose_brings_it_up_on_loopback_with_its_secrets(tmp_path: Path) -> None:
    """deploy/docker-compose.yml as written, under podman-compose, with this image."""
    compose = shutil.which("podman-compose")
    if compose is None:
        pytest.skip("podman-compose is not installed (make image-test installs it)")
    (tmp_path / "secrets").mkdir(mode=0o700)
    (tmp_path / "secrets" / "courier_api_key").write_text(KEY + "\n")
    (tmp_path / "secrets" / "upstream_api_key").write_text("not-used-here\n")
    for secret in (tmp_path / "secrets").iterdir():
        secret.chmod(0o644)  # as the compose file's header says: the 700 dir guards them
    shutil.copy(REPO / "deploy" / "docker-compose.yml", tmp_path / "docker-compose.yml")
    project = f"courier-it-compose-{uuid.uuid4().hex[:6]}"
    port = free_port()
    env = {**os.environ, "COURIER_IMAGE": IMAGE, "COURIER_PUBLISH_PORT": str(port)}
    base = [compose, "--podman-run-args=--runtime runc", "-p", project]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*base, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
        )

    container = f"{project}_courier_1"
    try:
        up = run("up", "-d")
        assert up.returncode == 0, up.stdout + up.stderr
        wait_healthy(f"http://127.0.0.1:{port}/health", container)
        podman("healthcheck", "run", container)
        assert podman("port", container).stdout.strip() == f"8642/tcp -> 127.0.0.1:{port}"
        models = httpx.get(
            f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {KEY}"}
        )
        assert models.status_code == 200  # the key came from the compose secret
        inspect = json.loads(podman("inspect", container).stdout)[0]
        assert inspect["HostConfig"]["ReadonlyRootfs"] is True
        assert inspect["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    finally:
        run("down")
        podman("volume", "rm", "-f", f"{project}_courier-data", check=False)
        podman("network", "rm", "-f", f"{project}_default", check=False)
