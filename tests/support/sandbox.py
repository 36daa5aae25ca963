"""The sandbox's status, pinned for tests that build the app in-process.

The app's lifespan (and /health/ready, and the terminal tool's offer) asks whether bwrap
starts by starting it once; the in-process tier starts no process (tests/unit/conftest.py),
so a test there that runs the lifespan takes this fixture: the status is the full profile's,
as on a host where bwrap works, without asking. Restored afterwards, so a later test that
probes for real is not answered by a fake.
"""

from __future__ import annotations

import pytest

import app.main
from app.tools.sandbox import process
from app.tools.sandbox.process import FULL_PROFILE, SandboxStatus


def _full() -> SandboxStatus:
    return SandboxStatus(FULL_PROFILE, "")


@pytest.fixture
def sandbox_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both places the name is looked up: the module's own callers and the lifespan's import.
    monkeypatch.setattr(process, "sandbox_status", _full)
    monkeypatch.setattr(app.main, "sandbox_status", _full)
