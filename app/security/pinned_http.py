"""An HTTP transport that reaches only addresses the SSRF guard allowed, for MCP servers
over HTTP.

An MCP server's URL comes from a file, but the name in it resolves at run time: a DNS
answer that turns into 127.0.0.1 or the cloud metadata address would make Courier send
requests (with the server's headers) inside its own network. So every request, redirects
and reconnects included, resolves its host through `resolve_and_check` and dials the
address that was checked, never the name again; the Host header and TLS server name stay
the name's. A JSON body is capped, since the SDK reads one whole (its SSE reader caps each
event itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import httpx2

from app.security.ssrf import resolve_and_check

DEFAULT_MAX_BODY_BYTES = 8 << 20


class BodyTooLarge(httpx2.ReadError):
    pass


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, request: httpx2.Request):
        self.inner = inner
        self.limit = limit
        self.request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise BodyTooLarge(f"response body over {self.limit} bytes", request=self.request)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class PinnedTransport(httpx2.AsyncBaseTransport):
    def __init__(
        self, allow: Sequence[str], *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    ) -> None:
        self.allow = tuple(allow)
        self.max_body_bytes = max_body_bytes
        self.inner = httpx2.AsyncHTTPTransport(retries=0, trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        # AddressRefused / ResolutionFailed propagate: the caller names the refusal.
        addresses = await resolve_and_check(url.host, port, allow=self.allow)
        request.headers["Host"] = url.netloc.decode("ascii")
        if url.scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": url.host}
        request.url = url.copy_with(host=addresses[0])
        response = await self.inner.handle_async_request(request)
        kind = response.headers.get("content-type", "")
        if not kind.startswith("text/event-stream"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Capped(response.stream, self.max_body_bytes, request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
