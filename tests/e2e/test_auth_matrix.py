"""Principals, scopes, limits and tokens over HTTP, against a real server.

Each scope is tried on each route: an allowed call gets past auth (a 400 for an empty
body, a 404 for a missing session), a denied one gets 403 before anything else runs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from jose import jwt

from app.config import ConfigError, load_settings
from app.security.auth import fingerprint
from tests.support.approvals import BackgroundTurn, call, decide, pending
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

SECRET = "token-secret-" + "x" * 40
KEYS = {
    "chatter": "chatter-key-0123456789abcdef",
    "reader": "reader-key-0123456789abcdef",
    "approver": "approver-key-0123456789abcdef",
    "ops": "ops-key-0123456789abcdef",
    "root": "root-key-0123456789abcdef",
    "limited": "limited-key-0123456789abcdef",
    "solo": "solo-key-0123456789abcdef",
    "worker": "worker-key-0123456789abcdef",
    "thrifty": "thrifty-key-0123456789abcdef",
}
SCOPES = {
    "chatter": ["chat"],
    "reader": ["sessions:read"],
    "approver": ["approvals"],
    "ops": ["metrics"],
    "root": ["admin"],
    "limited": ["chat"],
    "solo": ["chat"],
    "worker": ["chat", "sessions:read", "approvals"],
    "thrifty": ["chat"],
}


def _toml(path: Path) -> Path:
    lines = []
    for name, key in KEYS.items():
        lines.append(f'[[keys]]\nname = "{name}"\nscopes = {json.dumps(SCOPES[name])}')
        if name == "reader":  # given as a hash: the config file holds no secret
            lines.append(f'key_sha256 = "{hashlib.sha256(key.encode()).hexdigest()}"')
        else:
            lines.append(f'key = "{key}"')
        if name == "limited":
            lines.append("requests_per_minute = 3")
        if name == "solo":
            lines.append("max_concurrent_turns = 1")
        if name == "thrifty":
            lines.append('spend_cap_usd = "0.0000001"')
        lines.append("")
    path.write_text("\n".join(lines))
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth-ws")


@pytest.fixture(scope="module")
def server(
    module_servers: ServerFactory, ws: Path, tmp_path_factory: pytest.TempPathFactory
) -> Server:
    return module_servers(
        COURIER_CONFIG=str(_toml(tmp_path_factory.mktemp("auth-config") / "keys.toml")),
        COURIER_WORKSPACE=str(ws),
        COURIER_TOKENS_ENABLED="true",
        COURIER_TOKEN_SECRET=SECRET,
        COURIER_APPROVALS_SEPARATE_APPROVER="true",
        COURIER_MAX_CONCURRENT_TURNS="2",
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
    )


def _h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _request(server: Server, route: str, key: str) -> httpx.Response:
    base = server.base_url
    headers = _h(key)
    if route == "chat":
        return httpx.post(f"{base}/v1/chat/completions", content=b"{}", headers=headers)
    if route == "models":
        return httpx.get(f"{base}/v1/models", headers=headers)
    if route == "usage":
        return httpx.get(f"{base}/v1/sessions/sess_missing/usage", headers=headers)
    if route == "approvals":
        return httpx.get(f"{base}/v1/approvals", headers=headers)
    if route == "grants":
        return httpx.get(f"{base}/v1/approvals/grants", headers=headers)
    if route == "metrics":
        return httpx.get(f"{base}/metrics", headers=headers)
    if route == "tokens":
        return httpx.post(
            f"{base}/v1/tokens",
            json={"scopes": SCOPES_FOR_TOKEN.get(key, ["chat"])},
            headers=headers,
        )
    raise AssertionError(route)


SCOPES_FOR_TOKEN = {KEYS[name]: SCOPES[name][:1] for name in KEYS}
ROUTE_SCOPE = {
    "chat": {"chat"},
    "models": {"chat"},
    "usage": {"sessions:read"},
    "approvals": {"approvals"},
    "grants": {"approvals"},
    "metrics": {"metrics"},
    "tokens": {"chat", "admin"},
}
ALLOWED_STATUS = {
    "chat": 400,
    "models": 200,
    "usage": 404,
    "approvals": 200,
    "grants": 200,
    "metrics": 200,
    "tokens": 200,
}


@pytest.mark.parametrize("route", sorted(ROUTE_SCOPE))
@pytest.mark.parametrize("name", ["chatter", "reader", "approver", "ops", "root"])
def test_each_scope_on_each_route(server: Server, name: str, route: str) -> None:
    resp = _request(server, route, KEYS[name])
    allowed = "admin" in SCOPES[name] or bool(set(SCOPES[name]) & ROUTE_SCOPE[route])
    if allowed:
        assert resp.status_code == ALLOWED_STATUS[route], resp.text
    else:
        assert resp.status_code == 403, resp.text
        assert resp.json()["error"]["code"] == "insufficient_scope"


@pytest.mark.parametrize("route", sorted(ROUTE_SCOPE))
def test_no_key_and_wrong_key_are_401(server: Server, route: str) -> None:
    for key in ("", "not-a-key-at-all-0123456789"):
        assert _request(server, route, key).status_code == 401


def test_legacy_env_key_still_works(server: Server) -> None:
    assert httpx.get(f"{server.base_url}/v1/models", headers=server.headers()).status_code == 200


def _chat(server: Server, sim: Simulator, key: str, **headers: str) -> httpx.Response:
    sim.script([{"reply": {"text": "hello"}}])
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "hi"}]},
        headers={**_h(key), **headers},
        timeout=30,
    )


def test_another_principals_session_is_404(server: Server, sim: Simulator) -> None:
    session = _chat(server, sim, KEYS["chatter"]).headers["X-Session-Id"]
    usage = f"{server.base_url}/v1/sessions/{session}/usage"
    foreign = httpx.get(usage, headers=_h(KEYS["worker"]))
    missing = httpx.get(
        f"{server.base_url}/v1/sessions/sess_nope/usage", headers=_h(KEYS["worker"])
    )
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json()["error"]["message"].replace(session, "X") == missing.json()["error"][
        "message"
    ].replace("sess_nope", "X")
    resumed = _chat(server, sim, KEYS["worker"], **{"X-Session-Id": session})
    assert resumed.status_code == 404
    assert httpx.get(usage, headers=_h(KEYS["root"])).status_code == 200  # admin sees all


def test_rate_limit_gives_429_with_retry_after(server: Server) -> None:
    codes = [
        httpx.get(f"{server.base_url}/v1/models", headers=_h(KEYS["limited"])) for _ in range(4)
    ]
    assert [r.status_code for r in codes] == [200, 200, 200, 429]
    retry = int(codes[-1].headers["Retry-After"])
    assert 1 <= retry <= 60
    assert codes[-1].json()["error"]["code"] == "rate_limit_exceeded"
    # Other keys are not affected.
    assert httpx.get(f"{server.base_url}/v1/models", headers=_h(KEYS["chatter"])).status_code == 200


def test_a_keys_own_spend_cap_stops_it_and_only_it(server: Server, sim: Simulator) -> None:
    assert _chat(server, sim, KEYS["thrifty"]).status_code == 200  # spends past its cap
    before = len(sim.requests())
    refused = _chat(server, sim, KEYS["thrifty"])
    assert refused.status_code == 402
    assert refused.json()["error"]["code"] == "spend_limit_reached"
    assert len(sim.requests()) == before  # refused before any upstream call
    assert _chat(server, sim, KEYS["chatter"]).status_code == 200


def _background(server: Server, key: str) -> BackgroundTurn:
    return BackgroundTurn(server, "wait", key=key).start()


def test_concurrent_turn_limits_per_key_and_global(
    server: Server, sim: Simulator, ws: Path
) -> None:
    wait = {"reply": {"tool_calls": [call("wait", seconds=3)]}}
    sim.script([wait, wait, {"reply": {"text": "a"}}, {"reply": {"text": "b"}}])
    first = _background(server, KEYS["solo"])
    _until(lambda: (ws / "wait-started").exists())
    second = _chat_status(server, KEYS["solo"])
    assert second.status_code == 429 and second.json()["error"]["code"] == "concurrent_turn_limit"
    assert int(second.headers["Retry-After"]) >= 1
    (ws / "wait-started").unlink()
    other = _background(server, KEYS["chatter"])
    _until(lambda: (ws / "wait-started").exists())
    third = _chat_status(server, KEYS["worker"])  # the global cap is 2
    assert third.status_code == 429 and third.json()["error"]["code"] == "server_busy"
    assert "Retry-After" in third.headers
    first.join()
    other.join()
    (ws / "wait-started").unlink()


def _chat_status(server: Server, key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "x"}]},
        headers=_h(key),
        timeout=30,
    )


def _until(predicate: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)


def test_separate_approver_refuses_self_approval(server: Server, sim: Simulator, ws: Path) -> None:
    (ws / "junk").mkdir(exist_ok=True)
    sim.script(
        [
            {"reply": {"tool_calls": [call("terminal", command="cd junk && rm -rf *")]}},
            {"reply": {"text": "ok"}},
        ]
    )
    turn = _background(server, KEYS["worker"])
    [approval] = pending(server, key=KEYS["approver"])
    assert approval["requested_by"] == "worker"
    own = decide(server, approval["id"], "once", key=KEYS["worker"])
    assert own.status_code == 403 and "separate_approver" in own.json()["error"]["message"]
    assert decide(server, approval["id"], "deny", key=KEYS["approver"]).status_code == 200
    turn.join()


# ---------------------------------------------------------------- tokens


def _mint(server: Server, key: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/tokens", json=body, headers=_h(key))


def _models(server: Server, token: str) -> int:
    return httpx.get(f"{server.base_url}/v1/models", headers=_h(token)).status_code


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(owner: str, **extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {
        "iss": "courier",
        "aud": "courier",
        "sub": owner,
        "scopes": ["chat"],
        "iat": now,
        "exp": now + 600,
        **extra,
    }


def _hand_signed(header: dict[str, Any], claims: dict[str, Any], key: bytes) -> str:
    signing = _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())
    sig = hmac.new(key, signing.encode(), hashlib.sha256).digest()
    return signing + "." + _b64(sig)


def test_a_minted_token_works_where_keys_do(server: Server) -> None:
    minted = _mint(server, KEYS["chatter"], scopes=["chat"], ttl_s=600)
    assert minted.status_code == 200, minted.text
    body = minted.json()
    assert body["scopes"] == ["chat"] and body["expires_at"] <= time.time() + 3600
    assert _models(server, body["token"]) == 200
    claims = jwt.get_unverified_claims(body["token"])
    assert claims["aud"] == "courier" and claims["exp"] - claims["iat"] == 600
    # A token cannot mint a token.
    assert _mint(server, body["token"], scopes=["chat"]).status_code == 403


def test_token_refusals(server: Server) -> None:
    owner = fingerprint(KEYS["chatter"])
    now = int(time.time())
    valid = jwt.encode(_claims(owner), SECRET, algorithm="HS256")
    assert _models(server, valid) == 200  # the control: hand-made but correct
    expired = jwt.encode(_claims(owner, iat=now - 7200, exp=now - 3600), SECRET, algorithm="HS256")
    none_alg = (
        _b64(b'{"alg":"none","typ":"JWT"}') + "." + _b64(json.dumps(_claims(owner)).encode()) + "."
    )
    hs512 = jwt.encode(_claims(owner), SECRET, algorithm="HS512")
    rs256 = _hand_signed({"alg": "RS256", "typ": "JWT"}, _claims(owner), SECRET.encode())
    head, payload, sig = valid.split(".")
    raised = json.loads(base64.urlsafe_b64decode(payload + "=="))
    raised["scopes"] = ["chat", "admin"]
    tampered = f"{head}.{_b64(json.dumps(raised).encode())}.{sig}"
    wrong_aud = jwt.encode(_claims(owner, aud="someone-else"), SECRET, algorithm="HS256")
    escalated = jwt.encode(_claims(owner, scopes=["chat", "admin"]), SECRET, algorithm="HS256")
    too_long = jwt.encode(_claims(owner, exp=now + 7200), SECRET, algorithm="HS256")
    other_secret = jwt.encode(_claims(owner), "another-secret-" + "y" * 40, algorithm="HS256")
    # RFC 7515 §4.1.11: a header naming as critical an extension the server does not process.
    critical = {"alg": "HS256", "typ": "JWT", "crit": ["x-policy"], "x-policy": "mfa"}
    plain = {"alg": "HS256", "typ": "JWT", "x-policy": "mfa"}
    assert _models(server, _hand_signed(plain, _claims(owner), SECRET.encode())) == 200  # control
    for name, token in {
        "expired": expired,
        "alg none": none_alg,
        "HS512": hs512,
        "RS256 with the secret as a public key": rs256,
        "tampered payload": tampered,
        "wrong audience": wrong_aud,
        "scope outside the grant": escalated,
        "lifetime over an hour": too_long,
        "bad signature": other_secret,
        "an unknown crit header": _hand_signed(critical, _claims(owner), SECRET.encode()),
        "an empty crit header": _hand_signed(
            {**critical, "crit": []}, _claims(owner), SECRET.encode()
        ),
    }.items():
        assert _models(server, token) == 401, name


def test_minting_never_grants_more_than_the_key_has(server: Server) -> None:
    refused = _mint(server, KEYS["chatter"], scopes=["chat", "admin"])
    assert refused.status_code == 403 and "admin" in refused.json()["error"]["message"]
    assert _mint(server, KEYS["chatter"], ttl_s=7200).status_code == 400
    assert _mint(server, KEYS["approver"], scopes=["approvals"]).status_code == 403  # no chat


def test_a_session_bound_token_reaches_only_its_session(server: Server, sim: Simulator) -> None:
    mine = _chat(server, sim, KEYS["worker"]).headers["X-Session-Id"]
    other = _chat(server, sim, KEYS["worker"]).headers["X-Session-Id"]
    minted = _mint(server, KEYS["worker"], scopes=["chat", "sessions:read"], session_id=mine)
    assert minted.status_code == 200, minted.text
    token = minted.json()["token"]
    base = server.base_url
    assert httpx.get(f"{base}/v1/sessions/{mine}/usage", headers=_h(token)).status_code == 200
    assert httpx.get(f"{base}/v1/sessions/{other}/usage", headers=_h(token)).status_code == 404
    unbound = _chat(server, sim, token)
    assert unbound.status_code == 403
    assert unbound.json()["error"]["code"] == "token_session_mismatch"
    # Another session of the same key answers as a missing one (tests/test_bindings.py: all routes).
    foreign = _chat(server, sim, token, **{"X-Session-Id": other})
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "session_not_found"
    assert _chat(server, sim, token, **{"X-Session-Id": mine}).status_code == 200
    # Binding to someone else's session is refused like a missing one.
    chatter_session = _chat(server, sim, KEYS["chatter"]).headers["X-Session-Id"]
    assert _mint(server, KEYS["worker"], session_id=chatter_session).status_code == 404


def test_tokens_enabled_without_a_strong_secret_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("COURIER_CONFIG", raising=False)
    for secret in (None, "short-secret"):
        extra = {"token_secret": secret} if secret else {}
        with pytest.raises(ConfigError, match="at least 32 bytes"):
            load_settings(api_key="k" * 8 + "0123456789abcdef", tokens_enabled=True, **extra)
