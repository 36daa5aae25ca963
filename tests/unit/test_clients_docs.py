"""Every client the docs promise has its snippet in docs/clients.md (the snippets run against
a live server in tests/e2e/test_clients_docs.py)."""

from __future__ import annotations

import re

from tests.support.paths import REPO

DOC = REPO / "docs" / "clients.md"
_SNIPPET = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w+)\n(.*?)\n```", re.S)


def snippets() -> dict[str, tuple[str, str]]:
    return {name: (lang, code) for name, lang, code in _SNIPPET.findall(DOC.read_text())}


def test_every_client_has_a_snippet() -> None:
    found = snippets()
    expected = {
        "openai-python",
        "openai-python-tools",
        "openai-node",
        "openai-agents",
        "langchain",
        "livekit",
        "pipecat",
        "open-webui-env",
        "courier-toml",
        "courier-end-users-env",
    }
    assert expected <= set(found), f"missing: {expected - set(found)}"
