"""Keys never reach a log record or an error body: the redactor, the log filter, and the
FastAPI telemetry switch, in-process (the server's own log is checked in tests/e2e/)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import load_settings
from app.main import create_app
from app.security.redact import MASK, WITHHELD, Redactor


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


@pytest.mark.usefixtures("sandbox_present")
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


@pytest.mark.usefixtures("sandbox_present")
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
