"""The terminal tool against real bubblewrap: hostile commands fail inside, the host is intact.

Every hostile case checks the host side too (the file not written, the listener not
reached, the process gone), since an error message alone could come from a sandbox that
failed for some other reason while the attack still landed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.ops import ports
from app.tools.registry import ToolContext
from app.tools.sandbox import process as sandbox
from app.tools.sandbox.process import run_sandboxed
from app.tools.terminal import TERMINAL

SECRET = "s3cr3t-value-that-must-not-leak"


@pytest.fixture(scope="module", autouse=True)
def _require_bwrap() -> None:
    if not sandbox.bwrap_available():
        pytest.fail("bwrap is missing or cannot create a sandbox here; run `make install`")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def context(workspace: Path, **overrides: Any) -> ToolContext:
    return ToolContext(session_id="s-terminal", workspace=workspace, **overrides)


async def run(workspace: Path, command: str, **overrides: Any) -> str:
    args: dict[str, Any] = {"command": command}
    if "timeout" in overrides:
        args["timeout"] = overrides.pop("timeout")
    return await TERMINAL.handler(args, context(workspace, **overrides))


def host_pids_running(marker: bytes) -> list[int]:
    """Host processes whose argv contains `marker` (NUL-separated, as in /proc cmdline)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found


def wait_gone(marker: bytes, within_s: float = 5.0) -> list[int]:
    # Without a pids cgroup the PID namespace is torn down just after bwrap is reaped.
    deadline = time.monotonic() + within_s
    while (left := host_pids_running(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


async def test_writes_in_the_workspace_reach_the_host(workspace: Path) -> None:
    out = await run(workspace, "echo hi > a.txt && cat a.txt && pwd && id -un")
    assert out == "exit code: 0\nhi\n/workspace\ncourier\n"
    assert (workspace / "a.txt").read_text() == "hi\n"


async def test_exit_code_comes_first(workspace: Path) -> None:
    out = await run(workspace, "echo oops >&2; exit 3")
    assert out == "exit code: 3\noops\n"
    assert (await run(workspace, "true")) == "exit code: 0\n(no output)"


async def test_each_call_gets_a_fresh_tmp(workspace: Path) -> None:
    await run(workspace, "echo left > /tmp/x")
    out = await run(workspace, "cat /tmp/x")
    assert "No such file" in out


async def test_a_300_kb_output_arrives_whole(workspace: Path) -> None:
    # Under the cap: the spill layer, not this tool, decides what the model sees.
    out = await run(workspace, "seq 1 50000")
    assert out == "exit code: 0\n" + "".join(f"{i}\n" for i in range(1, 50001))


async def test_output_cap_keeps_head_and_tail(workspace: Path) -> None:
    result = await run_sandboxed("seq 1 50000", workspace, timeout_s=30, max_output_bytes=100_000)
    total = len("".join(f"{i}\n" for i in range(1, 50001)))
    assert result.dropped_bytes == total - 100_000
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.endswith("49999\n50000\n")
    assert f"[... {total - 100_000:,} bytes of output omitted ...]" in result.output
    assert len(result.output) < 100_200


async def test_default_cap_bounds_a_flood(workspace: Path) -> None:
    out = await run(workspace, "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo END")
    assert out.startswith("exit code: 0\nxxx")
    assert out.endswith("x\nEND\n")
    assert "bytes of output omitted" in out
    assert len(out) < sandbox.MAX_OUTPUT_BYTES + 200


async def test_writes_outside_the_workspace_fail(workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("original\n")
    out = await run(
        workspace,
        f"touch /usr/evil; echo x > /etc/evil; echo x > /evil; echo pwned > {outside}; "
        # Recreating the path inside writes only the sandbox's own throwaway /tmp.
        f"mkdir -p {outside.parent} && echo pwned > {outside} && echo wrote-inside; "
        f"ln -s {outside} link && echo pwned > link",
    )
    assert "/usr/evil': Read-only file system" in out
    assert "/etc/evil: Read-only file system" in out
    assert "/evil: Read-only file system" in out
    assert outside.read_text() == "original\n"
    assert not Path("/usr/evil").exists()
    assert not Path("/etc/evil").exists()
    assert not Path("/evil").exists()


async def test_kernel_settings_are_read_only(workspace: Path) -> None:
    # Writes back the value already there, so even a failing sandbox changes nothing; a
    # root-run sandbox could otherwise point core_pattern at a workspace script.
    out = await run(
        workspace,
        "v=$(cat /proc/sys/kernel/core_uses_pid) && echo $v > /proc/sys/kernel/core_uses_pid",
    )
    assert "Read-only file system" in out
    assert not out.startswith("exit code: 0")


async def test_no_setuid_files_reach_the_host(workspace: Path) -> None:
    # Host-side these files belong to whoever runs Courier (root in CI): a setuid bit would
    # hand that identity to any local user who can reach the workspace.
    out = await run(
        workspace,
        "cp /usr/bin/id a; chmod u+s a; chmod g+s a; chmod 4755 a; install -m 4755 a b; "
        "python3 -c \"import os; os.open('c', os.O_CREAT | os.O_WRONLY, 0o6755)\"; "
        "chmod 700 a && echo plain-chmod-works",
    )
    assert out.count("Operation not permitted") >= 4
    assert "plain-chmod-works" in out
    for path in workspace.iterdir():
        assert not path.stat().st_mode & 0o6000, path


async def test_host_secrets_are_not_visible(workspace: Path, tmp_path: Path) -> None:
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text(SECRET)
    out = await run(
        workspace,
        f"cat /etc/shadow; cat /etc/gshadow; cat {secret_dir}/key.txt; ls {secret_dir}; "
        "ls /root /home /etc/ssl/private; grep -rl s3cr3t /tmp /etc /workspace; true",
    )
    assert SECRET not in out
    assert "/etc/shadow: No such file or directory" in out
    assert "key.txt: No such file or directory" in out
    assert (await run(workspace, "test -e /etc/pip.conf || echo absent")).endswith("absent\n")


async def test_environment_is_scrubbed(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("COURIER_API_KEY", "COURIER_UPSTREAM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    out = await run(workspace, "env")
    assert SECRET not in out
    assert "COURIER" not in out
    assert "HOME=/workspace\n" in out
    assert "TERM=dumb\n" in out


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = ports.listen("127.0.0.1", 0, backlog=8)  # one the host really reaches
    server.setblocking(False)
    yield server
    server.close()


CONNECT = (
    "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); "
    "print('connected')\""
)


async def test_no_network_by_default(workspace: Path, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    out = await run(workspace, CONNECT.format(port=port))
    assert "connected" not in out.splitlines()
    assert not out.startswith("exit code: 0")
    with pytest.raises(BlockingIOError):  # nothing reached the host's listener
        listener.accept()


async def test_network_on_still_keeps_the_host_loopback_out(
    workspace: Path, listener: socket.socket
) -> None:
    # network = true used to share the host's namespace: this connect succeeded. Now the
    # sandbox's only way out is the egress proxy (tests/test_egress.py).
    port = listener.getsockname()[1]
    out = await run(workspace, CONNECT.format(port=port), network=True)
    assert "connected" not in out.splitlines()
    with pytest.raises(BlockingIOError):
        listener.accept()


async def test_fork_bomb_hits_the_process_limit(workspace: Path) -> None:
    assert sandbox.process_limit_enforced(), (
        "running as root without a usable pids cgroup: the sandbox has no process limit"
    )
    # dash, not bash: bash retries a failed fork for ~15 s before giving up.
    out = await run(
        workspace,
        "sh -c 'i=0; while [ $i -lt 2000 ]; do sleep 29.1 & i=$((i+1)); done; echo spawned-all'",
        timeout=20,
    )
    assert "Cannot fork" in out
    assert "spawned-all" not in out
    assert wait_gone(b"sleep\x0029.1") == []
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
    parent = sandbox.pids_cgroup_parent()
    if parent is not None:
        assert not [p for p in parent.iterdir() if p.name.startswith("courier-sandbox-")]


async def test_timeout_kills_everything(workspace: Path) -> None:
    out = await run(workspace, "echo started; sleep 28.3 & sleep 28.3", timeout=1)
    assert out == (
        "timed out after 1 s; the command and everything it started were killed\nstarted\n"
    )
    assert wait_gone(b"sleep\x0028.3") == []


async def test_timeout_is_capped_by_the_profile(workspace: Path) -> None:
    out = await run(workspace, "sleep 27.7", timeout=600, terminal_timeout_s=1.0)
    assert out.startswith("timed out after 1 s")
    assert wait_gone(b"sleep\x0027.7") == []


async def test_cancelled_call_kills_the_command(workspace: Path) -> None:
    task = asyncio.create_task(run(workspace, "sleep 26.9"))
    deadline = time.monotonic() + 5
    while not host_pids_running(b"sleep\x0026.9") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert host_pids_running(b"sleep\x0026.9")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone(b"sleep\x0026.9") == []


async def test_local_backend_runs_in_the_workspace_with_a_scrubbed_env(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURIER_API_KEY", SECRET)
    out = await run(workspace, "pwd; echo hi > b.txt; env", terminal_backend="local")
    assert out.startswith(f"exit code: 0\n{workspace.resolve()}\n")
    assert (workspace / "b.txt").read_text() == "hi\n"
    assert SECRET not in out
    assert "COURIER" not in out
    assert f"HOME={workspace.resolve()}\n" in out


async def test_local_backend_timeout_and_leftovers(workspace: Path) -> None:
    out = await run(workspace, "sleep 25.3", timeout=1, terminal_backend="local")
    assert out.startswith("timed out after 1 s")
    # A background job outliving a finished command is killed with the command's group.
    out = await run(workspace, "(sleep 24.9 &); echo done", terminal_backend="local")
    assert out == "exit code: 0\ndone\n"
    assert wait_gone(b"sleep\x0025.3") == []
    assert wait_gone(b"sleep\x0024.9") == []
    assert os.getpid()  # the test process itself was not in the killed group


async def test_the_host_keyring_is_invisible(workspace: Path) -> None:
    # The finding: /proc/keys in the sandbox listed the host keyring's entries.
    assert Path("/proc/keys").exists()
    script = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=1)
        "r = libc.syscall(250, 0, -3, 1); print('keyctl', r, ctypes.get_errno())"
    )
    out = await run(
        workspace, f'cat /proc/keys /proc/key-users 2>/dev/null | wc -c; python3 -c "{script}"'
    )
    assert out == "exit code: 0\n0\nkeyctl -1 38\n"  # nothing readable; ENOSYS
