"""What every test shares, in both tiers: tests/unit (in-process) and tests/e2e (real
servers, clients, browser, container and subprocesses)."""

from __future__ import annotations

import os

# Every store in the suite (in-process, and each server subprocess, which inherits this)
# checks its kept live log against a fresh read from the database on every call.
os.environ.setdefault("COURIER_VERIFY_LIVE_LOG", "1")

# Fixtures either tier may use (tests/README.md); the e2e tier's servers and simulator are
# registered in tests/e2e/conftest.py.
pytest_plugins = [
    "tests.support.clock",
    "tests.support.postgres",
    "tests.support.sandbox",
    "tests.support.scripted",
    "tests.support.store",
    "tests.support.stores",
    "tests.support.web_site",
]
