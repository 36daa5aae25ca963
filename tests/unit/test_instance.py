"""One server per data directory: the lock is exclusive and names its holder, and a session
write is fenced by its lease (the second real server is refused in tests/e2e/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.db.instance import DataDirBusy, DataDirLock
from app.db.store import LeaseLost, Store


def test_update_session_is_fenced_by_the_lease(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "c.db")
    store.create_session(session_id="s", owner="k", profile="courier", system_prompt="s")
    assert store.acquire_lease(session_id="s", lease="mine", ttl_s=60)
    store.update_session(session_id="s", lease="mine", compaction_strikes=1)
    with pytest.raises(LeaseLost):
        store.update_session(session_id="s", lease="stale", compaction_strikes=0)
    row = store.get_session(session_id="s")
    assert row is not None and row.compaction_strikes == 1
    store.close()


def test_the_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    lock = DataDirLock.acquire(tmp_path)
    # flock locks belong to the open file description: a second open in this process
    # conflicts just as another process would.
    with pytest.raises(DataDirBusy, match=f"pid {os.getpid()}"):
        DataDirLock.acquire(tmp_path)
    lock.release()
    DataDirLock.acquire(tmp_path).release()
