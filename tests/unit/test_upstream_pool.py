"""The upstream pool never silently caps the turn limit: a pool below it is refused at
startup (connection reuse is counted against the simulator in tests/e2e/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import ConfigError, load_settings

GOOD_KEY = "a-perfectly-fine-key-123"


def test_pool_below_the_turn_limit_is_refused_at_startup(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="UPSTREAM_MAX_CONNECTIONS=10 is below"):
        load_settings(api_key=GOOD_KEY, max_concurrent_turns=50, upstream_max_connections=10)
    settings = load_settings(api_key=GOOD_KEY, max_concurrent_turns=50)
    assert settings.upstream_pool_size() == 50
