"""A hung upstream is its own error kind on both wires: `timeout` (retried before any
output, may fall back), while a connect timeout stays a `connection` fault. The fault
matrix proves it over HTTP; these pin the classification on each adapter."""

from __future__ import annotations

import anthropic
import httpx
import httpx2

from app.agent.loop import upstream_turn_error
from app.api.http.statuses import turn_error_status
from app.providers.anthropic import map_sdk_error
from app.providers.base import ProviderError
from app.providers.openai_chat import _transport_kind


def _sdk_timeout(cause: BaseException) -> anthropic.APITimeoutError:
    exc = anthropic.APITimeoutError(request=httpx2.Request("POST", "http://127.0.0.1/v1"))
    exc.__cause__ = cause
    return exc


def test_the_timeout_kind_hints_retry_and_fallback() -> None:
    exc = ProviderError("timeout", "upstream went silent")
    assert exc.retryable and exc.should_fall_back
    assert not (exc.should_compress or exc.should_rotate or exc.give_up)
    error = upstream_turn_error(exc)
    assert (error.code, error.retryable, turn_error_status(error)) == (
        "upstream_timeout",
        True,
        504,
    )


def test_openai_wire_read_timeouts_are_timeouts_connect_timeouts_are_not() -> None:
    assert _transport_kind(httpx.ReadTimeout("silent")) == "timeout"
    assert _transport_kind(httpx.ConnectTimeout("no listener")) == "connection"
    assert _transport_kind(httpx.PoolTimeout("pool")) == "connection"
    assert _transport_kind(httpx.ConnectError("refused")) == "connection"


def test_anthropic_wire_read_timeouts_are_timeouts_connect_timeouts_are_not() -> None:
    assert map_sdk_error(_sdk_timeout(httpx2.ReadTimeout("silent"))).kind == "timeout"
    assert map_sdk_error(_sdk_timeout(httpx2.ConnectTimeout("none"))).kind == "connection"
    refused = anthropic.APIConnectionError(request=httpx2.Request("POST", "http://127.0.0.1"))
    assert map_sdk_error(refused).kind == "connection"
