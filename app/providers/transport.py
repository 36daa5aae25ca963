"""A lean HTTP/1.1 transport for httpx: asyncio protocols and the httptools parser.

httpx's default transport runs every upstream call through httpcore's pure-Python h11
state machine on anyio streams. Measured on one streamed 40-chunk reply from the
simulator (benchmarks/hot_path_floors.py), that costs about 2 ms of CPU per call and
15-24 µs per chunk, against 0.4 ms and 3 µs for a raw asyncio socket read of the same
bytes: the whole per-request budget of issue 10. Here the request goes out in one write,
the response is parsed by llhttp (the C parser uvicorn already uses for our own server),
and body chunks reach httpx without an anyio checkpoint per read.

httpx stays the client: auth, redirects, headers, decoding, timeouts and the exception
types are its own. Anything this transport does not handle (HTTP/2, streamed request
bodies, HEAD, other schemes) goes to httpx's default transport; an upstream behind a
proxy the environment names gets httpx's own transport (app/providers/clients.py), since
httpx ignores those variables for a client given a transport.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import cast

import httptools
import httpx

KEEPALIVE_EXPIRY_S = 5.0
"""httpx's own default: an idle connection older than this is closed, not reused (a
server's keep-alive timeout is often 5 s, so an older one may already be half-closed)."""
PAUSE_AT_BYTES = 1 << 20
"""Unread body past which the socket stops being read, until the consumer catches up."""


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; serves one exchange at a time."""

    def __init__(self, origin: tuple[str, str, int]) -> None:
        self.origin = origin
        self.loop = asyncio.get_running_loop()
        self.silence_timer: asyncio.TimerHandle | None = None
        self.wait_started = 0.0
        self.wait_timeout: float | None = None
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.head_done = False
        self.keep_alive = False
        self.complete = False
        self.until_close = False
        self.received = False
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False

    # ------------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx.RemoteProtocolError("unexpected protocol upgrade"))
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response: {exc}"))

    def eof_received(self) -> bool | None:
        self.closed = True  # never reused: connection_lost follows on the next loop turn
        return None  # close the transport: a half-open HTTP/1.1 connection is done

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.until_close and self.head_done and not self.complete:
            self.complete = True  # a body delimited by the connection's end
        elif not self.complete:
            reason = f": {exc}" if exc else ""
            if not self.received:
                error: Exception = httpx.RemoteProtocolError(
                    "server disconnected without sending a response" + reason
                )
            else:
                error = httpx.RemoteProtocolError("peer closed connection mid-response" + reason)
            self.error = self.error or error
        self._wake()

    # ------------------------------------------------------------------ parser callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True
        status = self.parser.get_status_code()
        if status < 200 and status != 101:
            self.headers.clear()  # an interim 1xx answer; the real one follows
            self.head_done = False
            return
        # Read here: llhttp forgets the answer once the message is complete.
        self.keep_alive = self.parser.should_keep_alive()
        names = {name.lower() for name, _ in self.headers}
        self.until_close = (
            b"content-length" not in names
            and b"transfer-encoding" not in names
            and status not in (204, 304)
        )
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > PAUSE_AT_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.head_done:
            self.complete = True
            self._wake()

    # ------------------------------------------------------------------ exchange

    def _fail(self, error: Exception) -> None:
        self.error = self.error or error
        if self.transport is not None:
            self.transport.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the parser has news; TimeoutError after `timeout` seconds of silence.

        One timer serves every wait of an exchange: it is armed at the first wait and,
        when it fires early, moved to the current wait's deadline. A timer per wait
        (`asyncio.timeout`) cost a timer handle, a context manager and a loop lookup on
        every read of every stream."""
        loop = self.loop
        self.waiter = waiter = loop.create_future()
        self.wait_started = loop.time()
        self.wait_timeout = timeout
        if timeout is not None and self.silence_timer is None:
            self.silence_timer = loop.call_at(self.wait_started + timeout, self._silence)
        try:
            await waiter
        finally:
            self.waiter = None

    def _silence(self) -> None:
        self.silence_timer = None
        waiter, timeout = self.waiter, self.wait_timeout
        if waiter is None or waiter.done() or timeout is None:
            return  # nobody waits on a deadline: the next wait arms the timer again
        deadline = self.wait_started + timeout
        if self.loop.time() < deadline:
            self.silence_timer = self.loop.call_at(deadline, self._silence)
        else:
            waiter.set_exception(TimeoutError())

    def quiet(self) -> None:
        """The exchange is over: no silence timer outlives it."""
        if self.silence_timer is not None:
            self.silence_timer.cancel()
            self.silence_timer = None

    def take(self) -> bytes:
        data = b"".join(self.chunks) if len(self.chunks) > 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return (
            self.complete
            and self.error is None
            and not self.closed
            and not self.until_close
            and self.keep_alive
        )

    def start(self) -> None:
        self._reset()
        self.parser = httptools.HttpResponseParser(self)

    def close(self) -> None:
        self.closed = True
        self.quiet()
        if self.transport is not None:
            self.transport.close()


class _Body(httpx.AsyncByteStream):
    def __init__(
        self, pool: LeanTransport, conn: _Connection, request: httpx.Request, read: float | None
    ) -> None:
        self._pool, self._conn, self._request, self._read = pool, conn, request, read
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
            elif conn.error is not None:
                raise _as_read_error(conn.error, self._request)
            elif conn.complete:
                return
            else:
                try:
                    await conn.wait(self._read)
                except TimeoutError:
                    raise httpx.ReadTimeout(
                        "timed out reading the response", request=self._request
                    ) from None

    async def aclose(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self._conn)


def _as_read_error(error: Exception, request: httpx.Request) -> httpx.HTTPError:
    if isinstance(error, httpx.HTTPError):
        error.request = request
        return error
    return httpx.ReadError(str(error), request=request)


async def send_streaming(client: httpx.AsyncClient, request: httpx.Request) -> httpx.Response:
    """`client.send(request, stream=True)` without the layers an upstream call never uses.

    Around the transport, httpx's `send` runs an auth flow, a redirect loop, a stream
    wrapper that times the response, a cookie extraction that builds urllib's request
    and response stand-ins, and an INFO log line whose arguments it formats whatever the
    level: about 4 % of a new-session request's instructions (callgrind, 9.34 -> 8.97 M).
    A client that has no auth, no event hooks and does not follow redirects gets the same
    response from its transport directly (the proxy its environment names included), and
    a response that sets a cookie still lands in its jar (a gateway's sticky session)."""
    if client.auth is not None or client.follow_redirects or _has_hooks(client):
        return await client.send(request, stream=True)
    # httpx's own choice for the URL (an environment proxy's mount, else the client's
    # transport): a private method, so the pinned httpx is tested for it.
    transport: httpx.AsyncBaseTransport = client._transport_for_url(request.url)
    try:
        response = await transport.handle_async_request(request)
    except httpx.RequestError as exc:
        try:
            exc.request  # noqa: B018  (a property that raises when unset)
        except RuntimeError:  # httpcore's errors come without their request; `send` adds it
            exc.request = request
        raise
    response.request = request
    if "set-cookie" in response.headers:
        client.cookies.extract_cookies(response)
    return response


def _has_hooks(client: httpx.AsyncClient) -> bool:
    hooks = client.event_hooks
    return bool(hooks["request"] or hooks["response"])


def body_chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """The response body as it arrives: straight from the transport's stream when there is
    no content coding to undo, else through httpx's decoders (gzip, br, deflate)."""
    if "content-encoding" in response.headers or not isinstance(
        response.stream, httpx.AsyncByteStream
    ):
        return response.aiter_bytes()
    return response.stream.__aiter__()


class Pieces(httpx.AsyncByteStream):
    """A request body as the pieces it was spliced from, sent as they are.

    A long session's upstream body is mostly kept encodings (40 KB tool outputs: 2 MB by
    turn 40); joining them into one bytes object copied all of it once more per call, and
    httpx joins any `ByteStream` it is given again. `LeanTransport` hands the pieces to
    one `writelines`; any other transport reads them in order (`Content-Length` is set
    by whoever builds the request, so nothing is chunked)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


def _chunked(body: bytes) -> bytes:
    return (b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)) if body else b"0\r\n\r\n"


class LeanTransport(httpx.AsyncBaseTransport):
    """Pooled HTTP/1.1 connections for http and https, at most `max_connections` open."""

    def __init__(self, *, max_connections: int, verify: ssl.SSLContext | bool = True) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._fallback: httpx.AsyncHTTPTransport | None = None
        self._fallback_limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        body = request.stream
        if (
            url.scheme not in ("http", "https")
            or request.method in ("HEAD", "CONNECT")
            or not isinstance(body, httpx.ByteStream | Pieces)
        ):
            return await self._default().handle_async_request(request)
        timeout = request.extensions.get("timeout", {})
        if self._slots.locked():
            try:
                async with asyncio.timeout(timeout.get("pool")):
                    await self._slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("no upstream connection free", request=request) from None
        else:
            await self._slots.acquire()  # a free slot: taken without suspending
        try:
            content = body.pieces if isinstance(body, Pieces) else [await request.aread()]
            return await self._exchange(request, content, timeout)
        except BaseException:
            self._slots.release()
            raise

    async def _exchange(
        self, request: httpx.Request, content: list[bytes], timeout: dict[str, float | None]
    ) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        origin = (url.scheme, url.host, port)
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        chunked = False
        for name, value in request.headers.raw:
            chunked = chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value)
            head.append(b"%s: %s\r\n" % (name, value))
        head.append(b"\r\n")
        # One write for head and body: two writes cost a second syscall and, with Nagle
        # on the peer's delayed ACK, can hold the body back a round trip. `writelines`
        # sends them in one writev without first copying a 2 MB body behind the head.
        body = [_chunked(b"".join(content))] if chunked else content
        data = [b"".join(head), *body]
        for attempt in (0, 1):
            conn = self._reuse(origin)
            fresh = conn is None
            if conn is None:
                conn = await self._connect(origin, request, timeout.get("connect"))
            conn.start()
            assert conn.transport is not None
            try:
                conn.transport.writelines(data)
            except RuntimeError:  # closed between the check and the write
                conn.close()
                if not fresh and attempt == 0:
                    continue
                raise httpx.WriteError("upstream connection closed", request=request) from None
            try:
                while not conn.head_done and conn.error is None:
                    await conn.wait(timeout.get("read"))
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout(
                    "timed out waiting for the response", request=request
                ) from None
            except BaseException:
                conn.close()
                raise
            if conn.error is not None:
                conn.close()
                # A kept-alive connection the server closed while idle (its keep-alive
                # timeout raced our reuse) answered nothing: one retry on a new one.
                if not fresh and not conn.received and attempt == 0:
                    continue
                raise _as_read_error(conn.error, request)
            return httpx.Response(
                conn.parser.get_status_code(),
                headers=conn.headers,
                stream=_Body(self, conn, request, timeout.get("read")),
                extensions={"http_version": b"HTTP/1.1"},
                request=request,
            )
        raise AssertionError("unreachable")

    def _reuse(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            alive = conn.transport is not None and not conn.transport.is_closing()
            if alive and not conn.closed and now - conn.idle_since < KEEPALIVE_EXPIRY_S:
                return conn
            conn.close()
        return None

    async def _connect(
        self, origin: tuple[str, str, int], request: httpx.Request, timeout: float | None
    ) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        conn = _Connection(origin)
        tls = self._ssl_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: conn, host, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(
                f"connecting to {host}:{port} timed out", request=request
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from None
        return conn

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            # Built on first use: loading the CA bundle costs tens of ms, and a plain-http
            # upstream (a local model server, the simulator) never needs it.
            if isinstance(self._verify, ssl.SSLContext):
                self._ssl = self._verify
            else:
                self._ssl = httpx.create_ssl_context(verify=self._verify)
                self._ssl.set_alpn_protocols(["http/1.1"])
        return self._ssl

    def release(self, conn: _Connection) -> None:
        """The exchange on `conn` is over: keep the connection for the next, or close it."""
        self._slots.release()
        conn.quiet()
        if conn.reusable():
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.origin, []).append(conn)
        else:
            conn.close()

    def _default(self) -> httpx.AsyncHTTPTransport:
        if self._fallback is None:
            self._fallback = httpx.AsyncHTTPTransport(
                verify=self._verify, limits=self._fallback_limits
            )
        return self._fallback

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        if self._fallback is not None:
            await self._fallback.aclose()
