"""The reduced sandbox profiles a container may fall back to, run for real on this host.

Each fallback drops one step bwrap cannot take inside a container's defaults; these tests
prove what replaces it still holds (no host processes visible, no nested user namespace)
and that a bare host never falls back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.tools.sandbox import process as sandbox
from app.tools.sandbox.process import (
    CONTAINER_FALLBACKS,
    FULL_PROFILE,
    SandboxProfile,
    run_sandboxed,
)

NO_PROC = SandboxProfile(hostname=False, fresh_proc=False, disable_userns=False)


@pytest.fixture(scope="module", autouse=True)
def _require_bwrap() -> None:
    if not sandbox.bwrap_available():
        pytest.fail("bwrap is missing or cannot create a sandbox here; run `make install`")


async def run(workspace: Path, command: str, profile: SandboxProfile) -> tuple[int | None, str]:
    result = await run_sandboxed(command, workspace, timeout_s=30, profile=profile)
    return result.exit_code, result.output


@pytest.mark.parametrize("profile", [FULL_PROFILE, *CONTAINER_FALLBACKS])
async def test_every_profile_runs_a_command_as_the_sandbox_user(
    tmp_path: Path, profile: SandboxProfile
) -> None:
    code, out = await run(tmp_path, "echo hi > f && cat f && id -u && pwd", profile)
    assert (code, out) == (0, "hi\n1000\n/workspace\n")
    assert (tmp_path / "f").read_text() == "hi\n"


@pytest.mark.parametrize("profile", CONTAINER_FALLBACKS)
async def test_a_fallback_keeps_its_refusals(tmp_path: Path, profile: SandboxProfile) -> None:
    # The host's files stay out of reach and the setuid filter still applies.
    code, out = await run(
        tmp_path, "cat /etc/shadow; ls /root; cp /bin/sh x && chmod u+s x; echo done", profile
    )
    assert code == 0 and out.endswith("done\n")
    assert not (tmp_path / "x").stat().st_mode & 0o4000


async def test_without_a_fresh_proc_no_process_is_visible(tmp_path: Path) -> None:
    # An empty /proc, never a bind of the outer one: that would show the server and its env.
    _, out = await run(tmp_path, "ls -A /proc | wc -l; cat /proc/1/environ", NO_PROC)
    assert out.startswith("0\n") and "No such file" in out


@pytest.mark.parametrize(
    "command",
    [
        "unshare --user true",  # unshare(2)
        "unshare --user --fork true",
        # unshare(CLONE_NEWUSER) straight from libc, exiting with its return value
        "python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare(0x10000000))'",
    ],
)
async def test_without_disable_userns_the_filter_refuses_user_namespaces(
    tmp_path: Path, command: str
) -> None:
    code, out = await run(tmp_path, f"{command} && echo NESTED", NO_PROC)
    assert "NESTED" not in out and code != 0
    # The same command under the full profile fails too, through bwrap's own option: the
    # test is not passing only because unshare is broken here.
    _, out = await run(tmp_path, f"{command} && echo NESTED", FULL_PROFILE)
    assert "NESTED" not in out


async def test_threads_still_start_when_clone3_is_refused(tmp_path: Path) -> None:
    # libc falls back from clone3 (ENOSYS) to clone without CLONE_NEWUSER, which is allowed.
    script = (
        "import threading; t = threading.Thread(target=print, args=('t',)); t.start(); t.join()"
    )
    code, out = await run(tmp_path, f'python3 -c "{script}"', NO_PROC)
    assert (code, out) == (0, "t\n")
