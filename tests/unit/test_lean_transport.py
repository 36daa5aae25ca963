"""The lean upstream transport (app/providers/transport.py) against real loopback servers.

Each test runs a small asyncio server on 127.0.0.1 that answers with exact bytes, so the
framings an upstream may use (chunked, Content-Length, close-delimited), its faults (a
drop mid-body, a closed idle connection, garbage, silence) and connection reuse are all
counted on a real socket.
"""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from app.providers.transport import LeanTransport, Pieces, body_chunks, send_streaming
from tests.support.lean_upstream import CHUNKED, answer, client, upstream


async def test_chunked_stream_and_one_connection_for_many_requests() -> None:
    async with upstream(answer(CHUNKED)) as up, client() as http:
        for _ in range(3):
            async with http.stream(
                "POST", f"http://127.0.0.1:{up.port}/v1/chat", content=b'{"x":1}'
            ) as resp:
                body = b"".join([chunk async for chunk in resp.aiter_bytes()])
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "text/event-stream"
            assert body == b'data: {"a":1}\n\ndata: {"b":2}\n\n'
        assert up.connections == 1
    head, _, body = up.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{up.port}".encode() in head.lower()
    assert body == b'{"x":1}'


async def test_content_length_and_query_string() -> None:
    raw = b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\nx-thing: yes\r\n\r\nhello"
    async with upstream(answer(raw)) as up, client() as http:
        resp = await http.get(f"http://127.0.0.1:{up.port}/a/b?q=1&r=two")
        again = await http.get(f"http://127.0.0.1:{up.port}/a")
    assert (resp.status_code, resp.text, resp.headers["x-thing"]) == (201, "hello", "yes")
    assert again.text == "hello"
    assert up.requests[0].startswith(b"GET /a/b?q=1&r=two HTTP/1.1\r\n")
    assert up.connections == 1


async def test_close_delimited_body_is_read_to_the_end_and_not_reused() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it"
    async with upstream(answer(raw, keep=False)) as up, client() as http:
        first = await http.get(f"http://127.0.0.1:{up.port}/")
        second = await http.get(f"http://127.0.0.1:{up.port}/")
    assert first.text == second.text == "all of it"
    assert up.connections == 2


async def test_interim_100_continue_is_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with upstream(answer(raw)) as up, client() as http:
        resp = await http.post(f"http://127.0.0.1:{up.port}/", content=b"x")
    assert (resp.status_code, resp.text) == (200, "ok")


async def test_drop_mid_body_is_a_protocol_error_while_reading() -> None:
    raw = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"
    async with upstream(answer(raw, keep=False)) as up, client() as http:
        got = b""
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", f"http://127.0.0.1:{up.port}/", content=b"{}") as r:
                async for chunk in r.aiter_bytes():
                    got += chunk
    assert got == b"hello"


async def test_garbage_is_a_protocol_error() -> None:
    async with upstream(answer(b"SMTP ready\r\n\r\n", keep=False)) as up, client() as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post(f"http://127.0.0.1:{up.port}/", content=b"{}")


async def test_no_answer_at_all_is_a_protocol_error() -> None:
    async def hang_up(_r: asyncio.StreamReader, _w: asyncio.StreamWriter, _b: bytes) -> bool:
        return False

    async with upstream(hang_up) as up, client() as http:
        with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
            await http.post(f"http://127.0.0.1:{up.port}/", content=b"{}")


async def test_idle_connection_closed_by_the_server_is_replaced() -> None:
    served = 0

    async def once_per_connection(
        _r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes
    ) -> bool:
        nonlocal served
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        return False  # advertises keep-alive, then closes: a keep-alive timeout

    async with upstream(once_per_connection) as up, client() as http:
        for _ in range(3):
            resp = await http.post(f"http://127.0.0.1:{up.port}/", content=b"{}")
            assert resp.text == "ok"
            await asyncio.sleep(0.05)  # the FIN arrives while the connection is idle
    assert served == 3
    assert up.connections == 3


async def test_early_close_of_a_stream_does_not_reuse_its_connection() -> None:
    async def endless(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
        await writer.drain()
        return True  # the body never ends; the next request would be read as more of it

    async with upstream(endless) as up, client() as http:
        for _ in range(2):
            async with http.stream("POST", f"http://127.0.0.1:{up.port}/", content=b"{}") as r:
                async for chunk in r.aiter_bytes():
                    assert chunk == b"abc"
                    break
    assert up.connections == 2


async def test_connect_refused_is_a_connect_error() -> None:
    async with upstream(answer(CHUNKED)) as up:
        port = up.port
    async with client() as http:
        with pytest.raises(httpx.ConnectError):
            await http.post(f"http://127.0.0.1:{port}/", content=b"{}")


async def test_silence_past_the_read_timeout() -> None:
    async def silent(_r: asyncio.StreamReader, _w: asyncio.StreamWriter, _b: bytes) -> bool:
        await asyncio.sleep(30)
        return False

    async with upstream(silent) as up, client(read=0.2) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post(f"http://127.0.0.1:{up.port}/", content=b"{}")


async def test_pool_cap_queues_and_times_out() -> None:
    release = asyncio.Event()

    async def held(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"ok")
        await writer.drain()
        return True

    async with upstream(held) as up, client(max_connections=1, pool=0.2) as http:
        url = f"http://127.0.0.1:{up.port}/"
        async with http.stream("POST", url, content=b"{}") as first:
            with pytest.raises(httpx.PoolTimeout):
                await http.post(url, content=b"{}")
            release.set()
            assert await first.aread() == b"ok"
        release.set()
        assert (await http.post(url, content=b"{}")).text == "ok"  # the slot came back
    assert up.connections == 1


async def test_head_goes_to_httpx_default_transport() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
    async with upstream(answer(raw)) as up, client() as http:
        resp = await http.head(f"http://127.0.0.1:{up.port}/")
    assert resp.status_code == 200
    assert resp.headers["content-length"] == "5"


async def test_httpx_own_transport_is_one_setting_away() -> None:
    from app.config import load_settings
    from app.providers.clients import UpstreamClients

    key = "a-perfectly-fine-key-123"
    assert load_settings(api_key=key).upstream_transport == "lean"
    settings = load_settings(api_key=key, upstream_transport="httpx")
    for lean, kind in ((True, LeanTransport), (False, httpx.AsyncHTTPTransport)):
        clients = UpstreamClients(max_connections=2, lean=lean)
        http = clients.for_url("http://127.0.0.1:1/v1", timeout=5)
        assert type(http._transport) is kind  # the transport httpx sends through
        await clients.aclose()
    assert settings.upstream_transport == "httpx"


async def _streamed(http: httpx.AsyncClient, url: str) -> tuple[httpx.Response, bytes]:
    response = await send_streaming(http, http.build_request("POST", url, content=b"{}"))
    try:
        return response, b"".join([chunk async for chunk in body_chunks(response)])
    finally:
        await response.aclose()


async def test_send_streaming_answers_as_send_does_and_reuses_the_connection() -> None:
    async with upstream(answer(CHUNKED)) as up, client() as http:
        url = f"http://127.0.0.1:{up.port}/v1/chat"
        for _ in range(3):
            response, body = await _streamed(http, url)
            assert response.status_code == 200 and response.request.url == url
            assert body == b'data: {"a":1}\n\ndata: {"b":2}\n\n'
        async with http.stream("POST", url, content=b"{}") as slow:
            assert b"".join([c async for c in slow.aiter_bytes()]) == body
    assert up.connections == 1
    assert up.requests[0] == up.requests[-1]  # the same bytes on the wire either way


async def test_send_streaming_keeps_a_cookie_the_upstream_sets() -> None:
    raw = b"HTTP/1.1 200 OK\r\nset-cookie: sticky=node-2; Path=/\r\ncontent-length: 2\r\n\r\nok"
    async with upstream(answer(raw)) as up, client() as http:
        _, body = await _streamed(http, f"http://127.0.0.1:{up.port}/v1/chat")
        assert body == b"ok" and http.cookies.get("sticky") == "node-2"
        await _streamed(http, f"http://127.0.0.1:{up.port}/v1/chat")
    assert b"cookie: sticky=node-2" in up.requests[1].lower()


async def test_send_streaming_goes_through_the_proxy_the_client_mounts() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nproxied"
    async with upstream(answer(raw)) as proxy:
        transport = LeanTransport(max_connections=2)
        proxy_url = f"http://127.0.0.1:{proxy.port}"
        async with httpx.AsyncClient(transport=transport, proxy=proxy_url) as http:
            _, body = await _streamed(http, "http://upstream.invalid:8080/v1/chat")
    assert body == b"proxied"
    # A proxy is sent the absolute form of the target.
    assert proxy.requests[0].startswith(b"POST http://upstream.invalid:8080/v1/chat HTTP/1.1")


async def test_an_environment_proxy_carries_the_upstream_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx ignores HTTP(S)_PROXY for a client given its own transport, so an upstream
    behind a proxy the environment names gets httpx's transport, which honours it."""
    from app.providers.clients import UpstreamClients

    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nproxied"
    async with upstream(answer(raw)) as proxy:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        clients = UpstreamClients(max_connections=2)
        http = clients.for_url("http://upstream.invalid:8080/v1", timeout=5)
        direct = clients.for_url("https://api.example.invalid/v1", timeout=5)
        try:
            _, body = await _streamed(http, "http://upstream.invalid:8080/v1/chat")
        finally:
            await clients.aclose()
    assert body == b"proxied"
    assert proxy.requests[0].startswith(b"POST http://upstream.invalid:8080/v1/chat HTTP/1.1")
    assert type(direct._transport) is LeanTransport  # no proxy named for https


async def test_send_streaming_decodes_a_compressed_body() -> None:
    packed = gzip.compress(b'data: {"a":1}\n\n')
    raw = (
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(packed)
        + packed
    )
    async with upstream(answer(raw)) as up, client() as http:
        _, body = await _streamed(http, f"http://127.0.0.1:{up.port}/v1/chat")
    assert body == b'data: {"a":1}\n\n'


async def test_send_streaming_leaves_a_client_with_auth_to_httpx() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with upstream(answer(raw)) as up:
        transport = LeanTransport(max_connections=2)
        async with httpx.AsyncClient(transport=transport, auth=("user", "pass")) as http:
            await _streamed(http, f"http://127.0.0.1:{up.port}/v1/chat")
    assert b"authorization: basic dxnlcjpwyxnz" in up.requests[0].lower()


async def test_send_streaming_errors_carry_their_request() -> None:
    async with upstream(answer(CHUNKED)) as up:
        port = up.port
    for transport in (LeanTransport(max_connections=2), httpx.AsyncHTTPTransport()):
        async with httpx.AsyncClient(transport=transport) as http:
            request = http.build_request("POST", f"http://127.0.0.1:{port}/", content=b"{}")
            with pytest.raises(httpx.ConnectError) as caught:
                await send_streaming(http, request)
            assert caught.value.request is request


async def test_the_read_timeout_bounds_each_silence_not_the_whole_body() -> None:
    """Chunks 0.1 s apart for 0.6 s under a 0.25 s read timeout arrive whole; a silence
    longer than the timeout after them is a ReadTimeout."""

    async def trickle(_r: asyncio.StreamReader, writer: asyncio.StreamWriter, _b: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(6):
            await asyncio.sleep(0.1)
            writer.write(b"2\r\n%02d\r\n" % i)
            await writer.drain()
        await asyncio.sleep(30)
        return False

    got: list[bytes] = []
    async with upstream(trickle) as up, client(read=0.25) as http:
        request = http.build_request("POST", f"http://127.0.0.1:{up.port}/", content=b"{}")
        response = await send_streaming(http, request)
        started = asyncio.get_running_loop().time()
        with pytest.raises(httpx.ReadTimeout):
            async for chunk in body_chunks(response):
                got.append(chunk)
        waited = asyncio.get_running_loop().time() - started
        await response.aclose()
    assert b"".join(got) == b"000102030405"
    assert waited < 5  # the silence after the last chunk, not the server's 30 s


async def test_a_body_in_pieces_arrives_whole_through_either_transport() -> None:
    """`Pieces` is written as it is by the lean transport and read in order by httpx's
    own (a proxy's mount): the upstream gets the same bytes and length either way."""
    pieces = [b'{"messages":[', b"x" * 70_000, b",", b'"y"', b"]}"]
    whole = b"".join(pieces)
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    length = (b"Content-Length", b"%d" % len(whole))
    async with upstream(answer(raw)) as up:
        for transport in (LeanTransport(max_connections=2), httpx.AsyncHTTPTransport()):
            async with httpx.AsyncClient(transport=transport) as http:
                url = f"http://127.0.0.1:{up.port}/v1/chat"
                host = (b"Host", b"127.0.0.1:%d" % up.port)
                request = httpx.Request("POST", url, headers=[host, length], stream=Pieces(pieces))
                resp = await send_streaming(http, request)
                await resp.aread()
                assert resp.text == "ok"
    assert len(up.requests) == 2
    for received in up.requests:
        head, _, body = received.partition(b"\r\n\r\n")
        assert body == whole
        assert f"content-length: {len(whole)}".encode() in head.lower()
        assert b"transfer-encoding" not in head.lower()
