"""One server per data directory; startup repair reclaims only leases of dead holders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.db.instance import DataDirLock, holder_alive, instance_id, new_lease_token
from app.db.store import Store
from tests.support.server import ServerFactory


def _dead_pid_lease() -> str:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return f"{proc.pid}.12345/abcdef"


def test_lease_tokens_name_a_live_holder() -> None:
    token = new_lease_token()
    assert token.startswith(instance_id() + "/")
    assert holder_alive(token)
    assert not holder_alive(_dead_pid_lease())
    # Our pid with another start time is a recycled pid, not us.
    assert not holder_alive(f"{os.getpid()}.1/x")
    assert not holder_alive("0123456789abcdef")  # a token from before instance ids


def test_startup_repair_keeps_live_leases(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "c.db")
    live, dead, legacy = new_lease_token(), _dead_pid_lease(), "deadbeef" * 4
    for sid, lease in [("live", live), ("dead", dead), ("legacy", legacy)]:
        store.create_session(
            session_id=sid,
            owner="k",
            profile="courier",
            system_prompt="s",
            lease=lease,
            lease_ttl_s=3600,
        )
    assert store.clear_dead_leases(holder_alive) == 2
    leases = {sid: store.get_session(session_id=sid).lease for sid in ("live", "dead", "legacy")}
    assert leases == {"live": live, "dead": None, "legacy": None}
    store.close()


def test_a_second_server_on_the_same_data_dir_is_refused(servers: ServerFactory) -> None:
    first = servers()
    data = first.data_dir
    assert first.proc is not None
    second = servers(data_dir=data, start=False)
    with pytest.raises(RuntimeError, match="server exited early") as info:
        second.start(timeout=60)
    assert f"is in use by another courier process (pid {first.proc.pid})" in str(info.value)
    assert second.proc is not None and second.proc.returncode == 3
    # The first is untouched and still serving.
    import httpx

    assert httpx.get(f"{first.base_url}/health", timeout=10).status_code == 200
    first.stop()
    # Once the holder is gone the lock is free again (the kernel drops it on exit).
    DataDirLock.acquire(data).release()
