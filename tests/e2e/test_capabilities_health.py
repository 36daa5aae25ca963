"""/v1/capabilities, /health/ready (and its 503 reasons), and the admin-only /openapi.json."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server import Server, ServerFactory, free_port
from tests.support.sim import Simulator

ADMIN_KEY = "admin-key-0123456789abcdef"


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory) -> Server:
    return module_servers(COURIER_ADMIN_API_KEY=ADMIN_KEY)


def test_capabilities_describe_profiles_features_and_limits(srv: Server) -> None:
    assert httpx.get(f"{srv.base_url}/v1/capabilities").status_code == 401
    caps = httpx.get(f"{srv.base_url}/v1/capabilities", headers=srv.headers()).json()
    assert caps["object"] == "courier.capabilities"
    (profile,) = caps["profiles"]
    assert profile["id"] == "courier" and profile["wire"] == "openai"
    assert profile["upstream_model"] == "gpt-4o-mini"
    assert "list_files" in profile["tools"] and profile["private_workspace"] is True
    features = caps["features"]
    assert features["responses"] is True and features["sessions_api"] is True
    assert features["background_responses"] is True
    assert caps["limits"]["max_body_bytes"] == 10 * 1024 * 1024
    assert caps["limits"]["spend_cap_key_usd"] is None


def test_capabilities_match_behaviour(srv: Server, sim: Simulator) -> None:
    """A feature reported off is refused; one reported on is not refused for support."""
    sim.script([{"reply": {"text": "ok"}}, {"reply": {"text": "in the background"}}])
    caps = httpx.get(f"{srv.base_url}/v1/capabilities", headers=srv.headers()).json()
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    resp = httpx.post(
        f"{srv.base_url}/v1/responses",
        json={"model": "courier", "input": "hi", "tools": [tool], "max_output_tokens": 1},
        headers=srv.headers(),
        timeout=30,
    )
    refused = resp.status_code == 400 and resp.json()["error"]["code"] == "unsupported_parameter"
    assert refused is not caps["features"]["client_tools"]
    background = httpx.post(
        f"{srv.base_url}/v1/responses",
        json={"model": "courier", "input": "hi", "background": True},
        headers=srv.headers(),
    )
    assert caps["features"]["background_responses"] is True
    assert background.status_code == 200 and background.json()["background"] is True
    # Finished before the next test scripts the simulator.
    url = f"{srv.base_url}/v1/responses/{background.json()['id']}"
    deadline = time.monotonic() + 20
    while httpx.get(url, headers=srv.headers()).json()["status"] != "completed":
        assert time.monotonic() < deadline, "the background response did not finish"
        time.sleep(0.05)


def test_ready_when_everything_answers(srv: Server) -> None:
    resp = httpx.get(f"{srv.base_url}/health/ready")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "upstream:courier", "sandbox"}
    assert all(c == {"ok": True} for c in body["checks"].values())


def test_not_ready_names_the_unreachable_upstream(servers: ServerFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = servers(COURIER_UPSTREAM_BASE_URL=f"{dead}/v1")
    resp = httpx.get(f"{server.base_url}/health/ready", timeout=30)
    assert resp.status_code == 503
    checks = resp.json()["checks"]
    assert checks["upstream:courier"]["ok"] is False
    assert "unreachable" in checks["upstream:courier"]["reason"]
    assert dead not in resp.text  # no URLs to an unauthenticated caller
    assert checks["database"] == {"ok": True}
    assert httpx.get(f"{server.base_url}/health").status_code == 200  # still live


def test_not_ready_when_the_database_refuses_writes(srv: Server) -> None:
    # Another writer holding the lock past the busy timeout is what a stuck process does.
    holder = sqlite3.connect(srv.data_dir / "courier.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        resp = httpx.get(f"{srv.base_url}/health/ready", timeout=30)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert resp.status_code == 503
    assert resp.json()["checks"]["database"]["ok"] is False
    assert "OperationalError" in resp.json()["checks"]["database"]["reason"]
    assert httpx.get(f"{srv.base_url}/health/ready", timeout=30).status_code == 200


def test_openapi_is_for_the_admin_scope_only(srv: Server) -> None:
    url = f"{srv.base_url}/openapi.json"
    assert httpx.get(url).status_code == 401
    denied = httpx.get(url, headers=srv.headers())
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "insufficient_scope"
    for public in ("/docs", "/redoc"):
        assert httpx.get(f"{srv.base_url}{public}").status_code == 404
    doc = httpx.get(url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()
    paths = doc["paths"]
    for path in (
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/responses/{response_id}",
        "/v1/sessions",
        "/v1/sessions/{session_id}/messages",
        "/v1/capabilities",
        "/health/ready",
    ):
        assert path in paths, path
    # Hand-parsed bodies are described from the models that parse them.
    for path in ("/v1/chat/completions", "/v1/responses"):
        ref = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        name = ref.rsplit("/", 1)[-1]
        assert "model" in doc["components"]["schemas"][name]["properties"]
    assert "/openapi.json" not in paths


def test_not_ready_when_the_sandbox_cannot_start(servers: ServerFactory, tmp_path: Path) -> None:
    # A bwrap that fails every call is what AppArmor or a container without user
    # namespaces leaves behind: the binary is there, no sandbox starts.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    (fake / "bwrap").chmod(0o755)
    server = servers(PATH=f"{fake}:{os.environ['PATH']}")
    resp = httpx.get(f"{server.base_url}/health/ready", timeout=30)
    assert resp.status_code == 503, resp.text
    checks = resp.json()["checks"]
    assert checks["sandbox"] == {
        "ok": False,
        "reason": "bubblewrap cannot start a sandbox on this host",
    }
    assert checks["database"] == {"ok": True}
    caps = httpx.get(f"{server.base_url}/v1/capabilities", headers=server.headers()).json()
    assert all("terminal" not in p["tools"] for p in caps["profiles"])  # not offered
