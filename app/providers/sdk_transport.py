"""Courier's `LeanTransport` under the anthropic SDK, which is built on httpx2, not httpx.

The SDK only accepts an `httpx2.AsyncClient`, and httpx2's default transport is httpcore2:
the same pure-Python h11-on-anyio path that cost the OpenAI wire about 2 ms of CPU per
streamed call before `LeanTransport` (benchmarks/hot_path_floors.py). httpx2 is a fork of
httpx with the same request, response and exception shapes, so this adapter hands each
httpx2 request to a `LeanTransport` as an httpx one and gives its response back as httpx2,
with its errors renamed to the httpx2 classes the SDK maps (a read timeout must still be
`httpx2.ReadTimeout`, or the SDK would report a silent upstream as a connection fault).
A second copy of the transport written against httpx2 would be the other way; this one
keeps a single connection pool implementation and costs a request object per call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import httpx
import httpx2

from app.providers.transport import LeanTransport


def _as_httpx2(exc: httpx.HTTPError, request: httpx2.Request) -> httpx2.HTTPError:
    """The httpx2 exception of the same name (every httpx transport error has one)."""
    kind = getattr(httpx2, type(exc).__name__, None)
    if not (isinstance(kind, type) and issubclass(kind, httpx2.TransportError)):
        kind = httpx2.TransportError
    return cast(httpx2.HTTPError, kind(str(exc), request=request))


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: httpx.Response, request: httpx2.Request) -> None:
        self._response, self._request = response, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # The raw stream, not `aiter_raw()`: httpx2 decodes the body itself.
        stream = cast(httpx.AsyncByteStream, self._response.stream)
        try:
            async for chunk in stream:
                yield chunk
        except httpx.HTTPError as exc:
            raise _as_httpx2(exc, self._request) from exc

    async def aclose(self) -> None:
        await self._response.aclose()


class LeanSDKTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport over a `LeanTransport` pool."""

    def __init__(self, inner: LeanTransport) -> None:
        self._inner = inner
        self._urls: dict[str, httpx.URL] = {}

    def _url(self, url: httpx2.URL) -> httpx.URL:
        # Parsed once per distinct URL: an httpx.URL costs tens of µs to build, and an
        # adapter calls the same endpoint every time.
        text = str(url)
        parsed = self._urls.get(text)
        if parsed is None:
            if len(self._urls) > 64:
                self._urls.clear()
            parsed = self._urls[text] = httpx.URL(text)
        return parsed

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        # `stream=`, not `content=`: httpx2 already set Host and Content-Length, and httpx
        # would otherwise encode and prepare the body a second time.
        inner = httpx.Request(
            request.method,
            self._url(request.url),
            headers=request.headers.raw,
            stream=httpx.ByteStream(await request.aread()),
            extensions=request.extensions,
        )
        try:
            response = await self._inner.handle_async_request(inner)
        except httpx.HTTPError as exc:
            raise _as_httpx2(exc, request) from exc
        return httpx2.Response(
            response.status_code,
            headers=response.headers.raw,
            stream=_Body(response, request),
            extensions=response.extensions,
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
