"""Pricing at startup, in a fresh interpreter: the app's startup parses the price table, off
any request's path (the figures themselves are checked in tests/unit/test_pricing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import REPO


def test_the_price_table_is_parsed_at_startup_not_at_the_first_call(tmp_path: Path) -> None:
    """In a fresh interpreter: the app's startup parses the table (before the startup
    freeze, off any request's path); importing the app alone does not."""
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from app.config import load_settings
        from app.main import create_app

        async def main():
            settings = load_settings(
                api_key="sk-courier-startup-0123456789",
                data_dir={str(tmp_path)!r},
                upstream_base_url="http://127.0.0.1:9",
            )
            app = create_app(settings)
            before = "genai_prices.data" in sys.modules
            async with app.router.lifespan_context(app):
                after = "genai_prices.data" in sys.modules
            print(before, after)

        asyncio.run(main())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURIER_")}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
