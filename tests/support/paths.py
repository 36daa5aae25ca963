"""Where the checkout's files are, named once: a test's own depth in tests/ must not decide
which directory it reads (a file moved between tiers would silently look one level off)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root (holds app/, deploy/, benchmarks/, tests/)."""
NODE_DIR = REPO / "tests" / "node"
"""The JavaScript clients' npm project (`make node-deps` installs its packages)."""
CAPTURES = REPO / "tests" / "fixtures" / "captured-requests.jsonl"
"""Requests captured from real clients, replayed by tests/e2e/test_compat_captured.py."""
