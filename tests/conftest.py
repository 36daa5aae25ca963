from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from tests.support.compat import compat_servers  # noqa: F401  (pytest fixtures)
from tests.support.fixtures import sim, simulator  # noqa: F401  (pytest fixtures)
from tests.support.server import Server, sim_env
from tests.support.sim import Simulator

# Every store in the suite (in-process, and each server subprocess, which inherits this)
# checks its kept live log against a fresh read from the database on every call.
os.environ.setdefault("COURIER_VERIFY_LIVE_LOG", "1")


@pytest.fixture(scope="module")
def server(simulator: Simulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:  # noqa: F811
    """A real Courier server on the OpenAI wire against the shared simulator, per module."""
    data_dir: Path = tmp_path_factory.mktemp("courier")
    srv = Server(data_dir=data_dir, env=sim_env(simulator.base_url)).start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server: Server) -> OpenAI:
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )
