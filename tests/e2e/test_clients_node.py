"""The official `openai` Node SDK (npm, pinned in tests/node/package-lock.json) against Courier.

`make test` installs it (`npm ci` in tests/node) when node and npm are present. Each test
here runs one `node --test` case from tests/node/clients.test.mjs against a live server and
the shared simulator (the Node side scripts the simulator through `/_sim/*`), so pytest
reports each case on its own. Without node, or without the installed SDK, the tests skip
and say which.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.support.paths import NODE_DIR
from tests.support.server import Server
from tests.support.sim import Simulator

SCRIPT = NODE_DIR / "clients.test.mjs"
CASES = re.findall(r'^test\("([^"]+)"', SCRIPT.read_text(), flags=re.M)


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.skip("node is not installed: the Node SDK tests did not run")
    if not (NODE_DIR / "node_modules" / "openai" / "package.json").is_file():
        pytest.skip("the openai Node SDK is not installed: run `make node-deps` (npm ci)")
    return found


@pytest.fixture
def server(compat_servers: dict[str, Server]) -> Server:
    return compat_servers["openai"]


def test_every_case_is_collected() -> None:
    assert len(CASES) == 4, CASES


@pytest.mark.parametrize("case", CASES)
def test_node_sdk(node: str, server: Server, sim: Simulator, case: str) -> None:
    env = {
        **os.environ,
        "COURIER_BASE_URL": server.base_url,
        "COURIER_API_KEY": server.api_key,
        "SIM_BASE_URL": sim.base_url,
    }
    pattern = "^" + re.escape(case) + "$"
    done = subprocess.run(
        [node, "--test", "--test-reporter=spec", f"--test-name-pattern={pattern}", SCRIPT.name],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert re.search(r"^ℹ pass 1$", output, flags=re.M), f"the case did not run:\n{output}"
