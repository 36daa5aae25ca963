"""The operator console: static HTML, CSS and one JavaScript module shipped in the package,
and the route that serves them (`router.py`).

No build step: the files here are what the browser runs, so an install from a wheel or the
container image serves the same bytes the tests exercised.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).with_name("static")
