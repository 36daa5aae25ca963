"""Security headers on every response; keys never reach a log record or an error body."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import load_settings
from app.main import create_app
from app.security.redact import MASK, WITHHELD, Redactor
from tests.support.server import Server, sim_env
from tests.support.sim import Simulator

EXPECTED = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def _check(resp: httpx.Response) -> None:
    for name, value in EXPECTED.items():
        assert resp.headers.get(name) == value, (resp.request.url, name)
    assert "default-src 'none'" in resp.headers["content-security-policy"]


def test_security_headers_on_every_kind_of_response(server: Server, sim: Simulator) -> None:
    base = server.base_url
    _check(httpx.get(f"{base}/health"))
    _check(httpx.get(f"{base}/v1/models"))  # 401
    _check(httpx.get(f"{base}/nowhere", headers=server.headers()))  # 404
    _check(httpx.post(f"{base}/v1/chat/completions", content=b"[", headers=server.headers()))
    sim.script([{"reply": {"text": "hi"}}])
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream(
        "POST", f"{base}/v1/chat/completions", json=body, headers=server.headers(), timeout=30
    ) as resp:
        _check(resp)  # the SSE stream too: headers are added without buffering the body
        assert "data: [DONE]" in list(resp.iter_lines())


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def captured() -> Iterator[_Capture]:
    root = logging.getLogger()
    handler, level = _Capture(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _everything(record: logging.LogRecord) -> str:
    return " ".join(
        str(part) for part in (record.getMessage(), record.args, record.exc_text, record.stack_info)
    )


async def test_a_requests_key_never_reaches_any_log_record(
    tmp_path: Path, captured: _Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-courier-the-real-key-0123456789"
    monkeypatch.delenv("COURIER_CONFIG", raising=False)
    settings = load_settings(api_key=key, data_dir=tmp_path, upstream_base_url="http://127.0.0.1:9")
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    auth = {"Authorization": f"Bearer {key}"}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://courier.test") as client,
    ):
        # The key pasted where it gets echoed: an ignored field's name, the model name.
        echoed = await client.post(
            "/v1/chat/completions",
            json={"model": key, "messages": [{"role": "user", "content": key}], key: 1},
            headers=auth,
        )
        near_miss = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}x"})
        in_query = await client.get(f"/v1/models?api_key={key}", headers=auth)
        logging.getLogger("app.test").warning("a caller logged the header %s", auth)
    assert echoed.status_code == 404 and key not in echoed.text
    assert MASK in echoed.json()["error"]["message"]
    assert near_miss.status_code == 401 and key not in near_miss.text
    assert in_query.status_code == 200
    assert captured.records, "nothing was logged: the test would prove nothing"
    leaked = [r for r in captured.records if key in _everything(r)]
    assert not leaked, [r.getMessage() for r in leaked]
    assert any(MASK in r.getMessage() for r in captured.records)


def test_the_log_filter_fails_closed(captured: _Capture) -> None:
    from app.security import redact

    redact.install(["a-configured-secret-value"])

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("a-configured-secret-value")

    logging.getLogger("app.test").error("value: %s", Hostile())
    logging.getLogger("app.test").error("plain a-configured-secret-value")
    withheld, masked = captured.records[-2:]
    assert withheld.getMessage() == WITHHELD
    assert masked.getMessage() == f"plain {MASK}"


def test_redactor_shapes() -> None:
    r = Redactor(["configured-key-0123456789"])
    assert r.redact("Authorization: Bearer abcdefghijklmnop") == f"Authorization: Bearer {MASK}"
    assert r.redact("x configured-key-0123456789 y") == f"x {MASK} y"
    assert r.redact("password=hunter22 rest") == f"password={MASK} rest"
    assert r.redact("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln") == MASK
    assert r.redact("an ordinary sentence stays") == "an ordinary sentence stays"


def test_the_subprocess_log_holds_no_key(sim: Simulator, tmp_path: Path) -> None:
    key = "sk-courier-subprocess-key-0123456789"
    env = sim_env(sim.base_url, COURIER_API_KEY=key, COURIER_LOG_LEVEL="debug")
    server = Server(data_dir=tmp_path, env=env).start()
    try:
        base = server.base_url
        sim.script([{"reply": {"text": "ok"}}])
        turn = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "courier", "messages": [{"role": "user", "content": "hi"}], key: 1},
            headers=server.headers(),
            timeout=30,
        )
        assert turn.status_code == 200, turn.text
        # The key as a message: the turn is held back before the upstream (issue 28), and
        # its refusal is logged without the key.
        held = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "courier", "messages": [{"role": "user", "content": key}]},
            headers=server.headers(),
            timeout=30,
        )
        assert held.json()["error"]["code"] == "secret_in_request", held.text
        httpx.get(f"{base}/v1/models?key={key}", headers=server.headers())
        httpx.get(f"{base}/v1/{key}", headers=server.headers())
        httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": key, "messages": [{"role": "user", "content": "x"}]},
            headers=server.headers(),
        )
    finally:
        server.stop()
    log = server.log()
    assert "turn=" in log  # the per-turn line was written: the log is not simply empty
    assert key not in log


@pytest.mark.parametrize("enabled", [False, True])
async def test_fastapi_telemetry_runs_only_when_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    """Off by default: FastAPI's OpenTelemetry hooks looked up the global providers on
    every request (to find none configured)."""
    from opentelemetry import trace

    lookups: list[int] = []
    real = trace.get_tracer_provider

    def counted() -> trace.TracerProvider:
        lookups.append(1)
        return real()

    monkeypatch.setattr(trace, "get_tracer_provider", counted)
    monkeypatch.delenv("COURIER_CONFIG", raising=False)
    key = "sk-courier-the-real-key-0123456789"
    settings = load_settings(
        api_key=key,
        data_dir=tmp_path,
        upstream_base_url="http://127.0.0.1:9",
        opentelemetry=enabled,
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://courier.test") as client,
    ):
        before = len(lookups)
        for _ in range(3):
            resp = await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert resp.status_code == 200
    assert (len(lookups) > before) is enabled
