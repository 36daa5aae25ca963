"""Settings every test shares, in both tiers: tests/unit (in-process) and tests/e2e (real
servers, clients, browser, container and subprocesses)."""

from __future__ import annotations

import os

# Every store in the suite (in-process, and each server subprocess, which inherits this)
# checks its kept live log against a fresh read from the database on every call.
os.environ.setdefault("COURIER_VERIFY_LIVE_LOG", "1")
