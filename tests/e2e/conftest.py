"""The end-to-end tier's fixtures: the upstream simulator process and real Courier servers."""

from __future__ import annotations

import pytest
from openai import OpenAI

from tests.support.compat import (  # noqa: F401  (pytest fixtures)
    compat_servers,
    compat_servers_postgres,
)
from tests.support.fixtures import sim, simulator  # noqa: F401  (pytest fixtures)
from tests.support.server import Server, ServerFactory, module_servers, servers  # noqa: F401


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> Server:  # noqa: F811
    """A real Courier server on the OpenAI wire against the shared simulator, per module."""
    return module_servers()


@pytest.fixture
def client(server: Server) -> OpenAI:
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )
