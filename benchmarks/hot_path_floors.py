"""The floor of each library layer under Courier's hot path, measured in the same run.

Issue 10 asks, where a library in the stack makes a CPU target unreachable, for the
measurement that proves it and what replacing the library would gain. This prints, for
one streamed request of 40 chunks (and per chunk, from 400-chunk replies), CPU of:

* Courier's own server per new-session request: the reference every ratio is against,
  and the same server with `COURIER_UPSTREAM_TRANSPORT=httpx` (httpx's own transport);
* servers (subprocesses; CPU read from the process CPU clock as in benchmarks/hot_path.py):
  `raw`, a bare uvicorn + httptools + uvloop raw ASGI app streaming pre-rendered SSE
  frames, one send per frame (the floor of the server stack itself); `fastapi-bare`, the
  same stream as a FastAPI route with an async dependency and Courier's
  `EventSourceResponse` and chunk templates; `fastapi`, that route behind Courier's
  middleware stack (security headers, CORS, HEAD); `relay` and `relay-lean`, the raw
  ASGI app relaying each request to the simulator through httpx (its default transport,
  then Courier's `LeanTransport`) and re-rendering every upstream chunk;
* clients (in this process, under uvloop, against the simulator in app/simulator/): a
  bare httpx `AsyncClient` streaming read of the reply, a raw asyncio socket reader of
  the same bytes, httpx on Courier's `LeanTransport`, and Courier's whole
  `OpenAIChatProvider.stream` (request, read, SSE parse, fold into events).

Figures and ratios only; nothing is asserted (the machine is shared and noisy).

    .venv/bin/python benchmarks/hot_path_floors.py [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Protocol

import httpx
from _harness import REPO_ROOT, free_port, stop, wait_http
from fastapi import Depends, FastAPI, Request
from hot_path import Rig, cpu_s, first_token_s, hello_body, load_limits, loaded_ttfts, pct, text_of

sys.path.insert(0, str(REPO_ROOT))

ROLE = (
    b'data: {"id":"chatcmpl-floor","object":"chat.completion.chunk","created":1,'
    b'"model":"courier","choices":[{"index":0,"delta":{"role":"assistant","content":""},'
    b'"finish_reason":null}]}\n\n'
)
TEXT_HEAD = (
    'data: {"id":"chatcmpl-floor","object":"chat.completion.chunk","created":1,'
    '"model":"courier","choices":[{"index":0,"delta":{"content":'
)
TEXT_TAIL = '},"finish_reason":null}]}\n\n'
FINISH = (
    b'data: {"id":"chatcmpl-floor","object":"chat.completion.chunk","created":1,'
    b'"model":"courier","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def text_frame(text: str) -> bytes:
    return (TEXT_HEAD + json.dumps(text, ensure_ascii=False) + TEXT_TAIL).encode()


# ---------------------------------------------------------------------------- the servers

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


async def raw_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Streams `chunks` text frames, one ASGI send each, as Courier's route would."""
    if scope["type"] != "http":
        return
    chunks = int(json.loads(await read_body(receive))["chunks"])
    await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    await send({"type": "http.response.body", "body": ROLE, "more_body": True})
    for i in range(chunks):
        frame = text_frame(f"word{i} ")
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": FINISH, "more_body": False})


async def principal(request: Request) -> str:
    """An async dependency that does no I/O, like Courier's `PrincipalDep`."""
    return request.headers.get("authorization", "")


PrincipalDep = Annotated[str, Depends(principal)]


def fastapi_app(*, middleware: bool = True) -> Any:
    """A FastAPI route behind Courier's own middleware stack and SSE response."""
    from app.api.chat.render import CompletionRenderer
    from app.api.http.cors import CorsMiddleware
    from app.api.http.head import HeadAsGet
    from app.api.http.security_headers import SecurityHeaders
    from app.api.http.sse import EventSourceResponse, ServerSentEvent

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    async def frames(chunks: int) -> AsyncIterator[bytes]:
        renderer = CompletionRenderer("courier")
        yield ServerSentEvent(data=renderer.role_chunk()).encode()
        for i in range(chunks):
            yield ServerSentEvent(data=renderer.text_chunk(f"word{i} ")).encode()
        yield ServerSentEvent(data="[DONE]").encode()

    @app.post("/v1/chat/completions")
    async def chat(request: Request, who: PrincipalDep) -> Any:
        chunks = int(json.loads(await request.body())["chunks"])
        return EventSourceResponse(frames(chunks), headers={"X-Session-Id": who[-8:]})

    if middleware:
        app.add_middleware(HeadAsGet)
        app.add_middleware(CorsMiddleware, origins=())
        app.add_middleware(SecurityHeaders)
    return app


async def upstream_chunks(resp: httpx.Response) -> AsyncIterator[list[dict[str, Any]]]:
    """The upstream's `data: {...}` chunks, parsed with orjson, as each read completes them."""
    import orjson

    buffer = b""
    async for raw in resp.aiter_bytes():
        buffer += raw
        *events, buffer = buffer.split(b"\n\n")
        yield [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]


def chunk_text(chunk: dict[str, Any]) -> str | None:
    choices = chunk.get("choices") or ()
    text: str | None = choices[0].get("delta", {}).get("content") if choices else None
    return text


FLOOR_POOL = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
"""A floor's upstream pool: above any load this runs, so no stream queues for a connection."""


def relay_app(upstream: str, *, lean: bool = False) -> Any:
    """Raw ASGI, relaying to the simulator through one pooled httpx client."""

    from app.providers.transport import LeanTransport

    client = httpx.AsyncClient(
        timeout=30,
        limits=FLOOR_POOL,
        transport=LeanTransport(max_connections=FLOOR_POOL.max_connections) if lean else None,
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        await send({"type": "http.response.body", "body": ROLE, "more_body": True})
        headers = {"authorization": "Bearer floor", "content-type": "application/json"}
        async with client.stream("POST", upstream, content=body, headers=headers) as resp:
            async for chunks in upstream_chunks(resp):
                out = [text_frame(text) for chunk in chunks if (text := chunk_text(chunk))]
                if out:
                    await send(
                        {"type": "http.response.body", "body": b"".join(out), "more_body": True}
                    )
        await send({"type": "http.response.body", "body": FINISH, "more_body": False})

    return app


STACK_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS session (id TEXT PRIMARY KEY, owner TEXT, prompt TEXT,"
    " calls INTEGER, cost TEXT, lease TEXT)",
    "CREATE TABLE IF NOT EXISTS message (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT,"
    " content TEXT)",
    "CREATE TABLE IF NOT EXISTS turn (id TEXT PRIMARY KEY, session_id TEXT, status TEXT)",
    "CREATE TABLE IF NOT EXISTS api_call (id INTEGER PRIMARY KEY, session_id TEXT,"
    " input INTEGER, output INTEGER, cost TEXT)",
    "CREATE TABLE IF NOT EXISTS todo (id INTEGER PRIMARY KEY, session_id TEXT, item TEXT)",
)
STACK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "todo",
            "description": "Keep the session's to-do list.",
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["add", "list"]},
                    "items": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["action"],
            },
        },
    }
]
STACK_MAX_CALLS = 4


def fold_tool_calls(chunk: dict[str, Any], calls: dict[int, dict[str, Any]]) -> None:
    """Streamed tool-call fragments into whole calls, keyed by their index."""
    choices = chunk.get("choices") or ()
    for part in (choices[0].get("delta") or {}).get("tool_calls") or () if choices else ():
        call = calls.setdefault(
            part["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        call["id"] = part.get("id") or call["id"]
        function = part.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""


def stack_app(upstream: str, data: Path) -> Any:
    """The thinnest Courier-shaped turn the design card's packages allow, each on its
    fast path: FastAPI behind Courier's middleware on a `DirectRoute`, the request
    validated by Courier's pydantic model, two SQLite transactions on a writer thread
    with one kept SQLAlchemy connection (a session, the user message and a turn before
    the call; the reply, a usage row, the session roll-up and the turn's end after it),
    the upstream call through httpx on `LeanTransport` with an orjson body, every chunk
    parsed with orjson and re-rendered by Courier's templates, each call priced from
    genai-prices' table by Courier's `price_usage` (its linear memo: the fastest use of
    the package, not a table of our own). A reply with tool calls adds what a tool turn
    must: an intent commit before the tool runs, the tool's rows and result in one
    commit, and the next upstream call. No agent logic at all: what any Courier turn
    costs before its own."""
    import asyncio
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    import orjson
    from fastapi import APIRouter
    from sqlalchemy import create_engine

    from app.api.chat.render import CompletionRenderer
    from app.api.chat.wire import ChatCompletionRequest
    from app.api.http.cors import CorsMiddleware
    from app.api.http.direct import DirectRoute
    from app.api.http.head import HeadAsGet
    from app.api.http.security_headers import SecurityHeaders
    from app.api.http.sse import EventSourceResponse, ServerSentEvent
    from app.providers.pricing import price_usage
    from app.providers.transport import LeanTransport
    from app.providers.usage import Usage

    db = data / "floor.db"
    engine = create_engine(f"sqlite:///{db}", connect_args={"check_same_thread": False})
    writer = ThreadPoolExecutor(max_workers=1)
    kept: list[Any] = []

    def dbapi() -> Any:
        if not kept:
            conn = engine.connect()
            raw: Any = conn.connection.dbapi_connection
            raw.execute("PRAGMA journal_mode=WAL")
            raw.execute("PRAGMA synchronous=NORMAL")
            for ddl in STACK_SCHEMA:
                raw.execute(ddl)
            kept.append(conn)
        return kept[0].connection.dbapi_connection

    def open_turn(sid: str, owner: str, text: str) -> None:
        raw = dbapi()
        raw.execute("BEGIN")
        raw.execute(
            "INSERT INTO session (id, owner, prompt, calls, cost, lease)"
            " VALUES (?, ?, ?, 0, '0', ?)",
            (sid, owner, "You are Courier.", "L"),
        )
        raw.execute(
            "INSERT INTO message (session_id, role, content) VALUES (?, 'user', ?)", (sid, text)
        )
        raw.execute(
            "INSERT INTO turn (id, session_id, status) VALUES (?, ?, 'running')", (sid, sid)
        )
        raw.commit()

    def close_turn(sid: str, reply: str, usage: dict[str, int], cost: str) -> None:
        raw = dbapi()
        raw.execute("BEGIN")
        raw.execute(
            "INSERT INTO message (session_id, role, content) VALUES (?, 'assistant', ?)",
            (sid, reply),
        )
        raw.execute(
            "INSERT INTO api_call (session_id, input, output, cost) VALUES (?, ?, ?, ?)",
            (sid, usage["prompt_tokens"], usage["completion_tokens"], cost),
        )
        raw.execute(
            "UPDATE session SET calls = calls + 1, cost = ?, lease = NULL"
            " WHERE id = ? AND lease = 'L'",
            (cost, sid),
        )
        raw.execute("UPDATE turn SET status = 'done' WHERE id = ?", (sid,))
        raw.commit()

    def record_intent(
        sid: str, assistant: dict[str, Any], usage: dict[str, int], cost: str
    ) -> None:
        # Persist before act: the model's tool calls and its priced call, before the tool runs.
        raw = dbapi()
        raw.execute("BEGIN")
        raw.execute(
            "INSERT INTO message (session_id, role, content) VALUES (?, 'assistant', ?)",
            (sid, orjson.dumps(assistant["tool_calls"]).decode()),
        )
        raw.execute(
            "INSERT INTO api_call (session_id, input, output, cost) VALUES (?, ?, ?, ?)",
            (sid, usage["prompt_tokens"], usage["completion_tokens"], cost),
        )
        raw.execute("UPDATE session SET calls = calls + 1, cost = ? WHERE id = ?", (cost, sid))
        raw.commit()

    def run_tools(sid: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The benchmark's one tool, a to-do list: its rows and its result in one commit."""
        raw = dbapi()
        raw.execute("BEGIN")
        results = []
        for call in calls:
            items = orjson.loads(call["function"]["arguments"]).get("items") or []
            raw.executemany(
                "INSERT INTO todo (session_id, item) VALUES (?, ?)", [(sid, i) for i in items]
            )
            content = f"added {len(items)} item(s)"
            raw.execute(
                "INSERT INTO message (session_id, role, content) VALUES (?, 'tool', ?)",
                (sid, content),
            )
            results.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raw.commit()
        return results

    client = httpx.AsyncClient(
        timeout=30,
        limits=FLOOR_POOL,
        transport=LeanTransport(max_connections=FLOOR_POOL.max_connections),
    )
    loop_run = asyncio.get_running_loop
    headers = {"authorization": "Bearer floor", "content-type": "application/json"}

    def price(usage: dict[str, int]) -> str:
        return str(
            price_usage(
                Usage(
                    input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]
                ),
                model="gpt-4o-mini",
                provider="openai",
            ).amount
        )

    async def frames(sid: str, chat: ChatCompletionRequest) -> AsyncIterator[bytes]:
        renderer = CompletionRenderer(chat.model)
        yield ServerSentEvent(data=renderer.role_chunk()).encode()
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are Courier."}]
        messages += [m.model_dump(exclude_none=True) for m in chat.messages]
        for _call in range(STACK_MAX_CALLS):
            body = orjson.dumps(
                {
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": messages,
                    "tools": STACK_TOOLS,
                }
            )
            reply: list[str] = []
            calls: dict[int, dict[str, Any]] = {}
            usage = {"prompt_tokens": 0, "completion_tokens": 0}
            async with client.stream("POST", upstream, content=body, headers=headers) as resp:
                async for chunks in upstream_chunks(resp):
                    out = []
                    for chunk in chunks:
                        usage = chunk.get("usage") or usage
                        if text := chunk_text(chunk):
                            reply.append(text)
                            out.append(renderer.text_sse(text))
                        fold_tool_calls(chunk, calls)
                    if out:
                        yield b"".join(out)
            cost = price(usage)
            if not calls:
                await loop_run().run_in_executor(
                    writer, close_turn, sid, "".join(reply), usage, cost
                )
                break
            assistant = {"role": "assistant", "content": None, "tool_calls": list(calls.values())}
            await loop_run().run_in_executor(writer, record_intent, sid, assistant, usage, cost)
            results = await loop_run().run_in_executor(
                writer, run_tools, sid, assistant["tool_calls"]
            )
            messages += [assistant, *results]
        yield ServerSentEvent(data="[DONE]").encode()

    async def chat(request: Request) -> Any:
        owner = request.headers.get("authorization", "")
        chat = ChatCompletionRequest.model_validate(orjson.loads(await request.body()))
        sid = uuid.uuid4().hex
        text = str(chat.messages[-1].content)
        await loop_run().run_in_executor(writer, open_turn, sid, owner[-8:], text)
        return EventSourceResponse(frames(sid, chat), headers={"X-Session-Id": sid})

    router = APIRouter(route_class=DirectRoute)
    router.add_api_route("/v1/chat/completions", chat, methods=["POST"])
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(router)
    app.add_middleware(HeadAsGet)
    app.add_middleware(CorsMiddleware, origins=())
    app.add_middleware(SecurityHeaders)
    return app


def serve(kind: str, port: int, upstream: str, data: Path) -> None:
    import uvicorn

    app = {
        "raw": lambda: raw_app,
        "fastapi-bare": lambda: fastapi_app(middleware=False),
        "fastapi": fastapi_app,
        "relay": lambda: relay_app(upstream),
        "relay-lean": lambda: relay_app(upstream, lean=True),
        "stack": lambda: stack_app(upstream, data),
    }
    config = uvicorn.Config(
        app[kind](),
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        access_log=False,
        log_config=None,
        log_level="warning",
    )
    uvicorn.Server(config).run()


# ---------------------------------------------------------------------------- server floors


def start_floor(kind: str, port: int, upstream: str, data: Path) -> Any:
    import subprocess

    command = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
    command += ["--upstream", upstream, "--data", str(data)]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def stream_once(http: httpx.Client, url: str, body: dict[str, Any]) -> None:
    headers = {"Authorization": "Bearer floor-key-0123456789"}
    with http.stream("POST", url, json=body, headers=headers) as resp:
        resp.raise_for_status()
        for _line in resp.iter_lines():
            pass


FLOOR_BODY: dict[str, Any] = {
    "model": "gpt-4o-mini",
    "stream": True,
    "messages": [{"role": "user", "content": "Say something."}],
}


def tool_steps(count: int, words: int = 40) -> list[dict[str, Any]]:
    """Scripted upstream replies for `count` tool turns: a to-do call, then a text reply."""
    call = {"name": "todo", "arguments": {"action": "add", "items": ["check the logs"]}}
    return [{"reply": {"tool_calls": [call]}}, {"reply": {"text": text_of(words)}}] * count


class Floor:
    """One floor server in a subprocess, with its own files, removed on close (a
    terminated uvicorn skips the child's atexit)."""

    def __init__(self, kind: str, sim: Rig) -> None:
        self.kind = kind
        self.data = Path(tempfile.mkdtemp(prefix="courier-floor-"))
        port = free_port()
        self.proc = start_floor(kind, port, sim.direct_url, self.data)
        self.url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wait_http(f"http://127.0.0.1:{port}/")

    def close(self) -> None:
        stop(self.proc)
        shutil.rmtree(self.data, ignore_errors=True)


def server_floor(kind: str, n: int, sim: Rig, http: httpx.Client) -> tuple[float, float]:
    """(CPU ms per 40-chunk request, CPU µs per chunk) of one floor server."""
    floor = Floor(kind, sim)
    try:
        relays = kind.startswith("relay")

        def run(chunks: int) -> float:
            body: dict[str, Any] = {"chunks": chunks}
            if relays:
                sim.script([{"reply": {"text": text_of(chunks)}}] * (n + 5))
                body = FLOOR_BODY
            for _ in range(5):
                stream_once(http, floor.url, body)
            before = cpu_s(floor.proc.pid)
            for _ in range(n):
                stream_once(http, floor.url, body)
            return (cpu_s(floor.proc.pid) - before) * 1000 / n

        small, big = run(40), run(400)
        return small, (big - small) / 360 * 1000
    finally:
        floor.close()


class FloorTurns:
    """A floor server that relays upstream, driven like a `Rig` (its simulator is the
    rig's), so `courier_reference` measures it in the same alternating blocks."""

    def __init__(self, floor: Floor, sim: Rig, http: httpx.Client) -> None:
        self.sim, self.http, self.url = sim, http, floor.url
        self.server = floor.proc

    def script(self, steps: list[dict[str, Any]]) -> None:
        self.sim.script(steps)

    def turn(self) -> str:
        stream_once(self.http, self.url, FLOOR_BODY)
        return ""


class Turns(Protocol):
    """What `courier_reference` drives: a server process, its upstream's script, a turn."""

    server: Any

    def script(self, steps: list[dict[str, Any]]) -> None: ...

    def turn(self) -> str: ...


# ---------------------------------------------------------------------------- client floors


def _request_bytes(url: httpx.URL, body: bytes) -> bytes:
    head = (
        f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
        "Authorization: Bearer floor\r\nContent-Type: application/json\r\n"
        "Accept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Reader(asyncio.Protocol):
    """Collects a chunked response until its terminating chunk: the least a client can do."""

    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.tail = b""

    def data_received(self, data: bytes) -> None:
        self.tail = (self.tail + data)[-5:]
        if self.tail == b"0\r\n\r\n" and self.done is not None and not self.done.done():
            self.done.set_result(None)


WARM = 5


async def _raw_reads(url: str, body: bytes, n: int) -> float:
    parsed = httpx.URL(url)
    loop = asyncio.get_running_loop()
    transport, reader = await loop.create_connection(_Reader, parsed.host, parsed.port)
    request = _request_bytes(parsed, body)
    for i in range(WARM + n):
        if i == WARM:
            started = time.process_time()
        reader.done = loop.create_future()
        reader.tail = b""
        transport.write(request)
        await reader.done
    took = time.process_time() - started
    transport.close()
    return took


async def _httpx_reads(url: str, body: bytes, n: int, *, lean: bool = False) -> float:
    from app.providers.transport import LeanTransport

    headers = {"authorization": "Bearer floor", "content-type": "application/json"}
    transport = LeanTransport(max_connections=10) if lean else None
    async with httpx.AsyncClient(timeout=30, transport=transport) as client:
        for i in range(WARM + n):
            if i == WARM:
                started = time.process_time()
            async with client.stream("POST", url, content=body, headers=headers) as resp:
                async for _chunk in resp.aiter_bytes():
                    pass
        return time.process_time() - started


async def _lean_reads(url: str, body: bytes, n: int) -> float:
    return await _httpx_reads(url, body, n, lean=True)


async def _provider_reads(url: str, body: bytes, n: int) -> float:
    from app.providers.base import ModelRequest, UserMessage
    from app.providers.clients import UpstreamClients
    from app.providers.openai_chat import OpenAIChatProvider

    clients = UpstreamClients(max_connections=10)
    base = url.removesuffix("/chat/completions")
    provider = OpenAIChatProvider(base, "floor", http_client=clients.for_url(base, timeout=30))
    request = ModelRequest(
        model="gpt-4o-mini", system=(), messages=(UserMessage("Say something."),)
    )
    for i in range(WARM + n):
        if i == WARM:
            started = time.process_time()
        async for _event in provider.stream(request):
            pass
    took = time.process_time() - started
    await clients.aclose()
    return took


def client_floor(
    reads: Callable[[str, bytes, int], Awaitable[float]], sim: Rig, n: int
) -> tuple[float, float]:
    """(CPU ms per 40-chunk read, CPU µs per chunk) in this process, under uvloop."""
    import uvloop

    body = json.dumps(
        {
            "model": "gpt-4o-mini",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Say something."}],
        }
    ).encode()

    def run(chunks: int) -> float:
        sim.script([{"reply": {"text": text_of(chunks)}}] * (n + WARM))
        return uvloop.run(reads(sim.direct_url, body, n)) * 1000 / n

    small, big = run(40), run(400)
    return small, (big - small) / 360 * 1000


# ---------------------------------------------------------------------------- loaded floors


def loaded_ttft(
    rig: Rig, http: httpx.Client, kinds: list[str], workers: int, seconds: float
) -> list[tuple[str, float, float]]:
    """(name, added TTFT p50 ms, p99 ms) at `workers` concurrent slow streams, for Courier
    and each floor server, each against the simulator called directly with the very
    request that server sends upstream (the same load generator as hot_path.py's)."""
    out: list[tuple[str, float, float]] = []
    targets: list[tuple[str, str, str, Floor | None]] = [("courier", rig.url, "courier", None)]
    for kind in kinds:
        floor = Floor(kind, rig)
        targets.append((kind, floor.url, "gpt-4o-mini", floor))
    try:
        for name, url, model, _floor in targets:
            rig.reset()
            for _ in range(3):
                first_token_s(http, url, rig.auth, hello_body(model))
            upstream = rig.upstream_body()
            # 20 tokens/s: multi-second streams, as a voice client's replies are.
            rig.configure(tokens_per_second=20)
            direct = asyncio.run(
                loaded_ttfts(rig.direct_url, "gpt-4o-mini", rig.auth, workers, seconds, upstream)
            )
            through = asyncio.run(loaded_ttfts(url, model, rig.auth, workers, seconds))
            out.append(
                (
                    name,
                    (statistics.median(through) - statistics.median(direct)) * 1000,
                    (pct(through, 0.99) - pct(direct, 0.99)) * 1000,
                )
            )
    finally:
        rig.reset()
        for *_, floor in targets:
            if floor is not None:
                floor.close()
    return out


# ---------------------------------------------------------------------------- report


def courier_reference(
    rigs: Sequence[Turns], n: int, block: int = 20
) -> list[tuple[float, float, float]]:
    """(CPU ms per 40-chunk request, CPU µs per chunk, CPU ms per tool turn) of each
    server, measured in alternating blocks so that the machine's drift hits every server
    alike (one floor measured after another drifted by more than they differed)."""
    for rig in rigs:
        for _ in range(5):
            rig.turn()
    kinds: dict[str, Callable[[int], list[dict[str, Any]]]] = {
        "40": lambda count: [{"reply": {"text": text_of(40)}}] * count,
        "400": lambda count: [{"reply": {"text": text_of(400)}}] * count,
        "tool": tool_steps,
    }
    cpu = {(i, kind): 0.0 for i in range(len(rigs)) for kind in kinds}
    for kind, steps in kinds.items():
        for start in range(0, n, block):
            count = min(block, n - start)
            order = list(enumerate(rigs))
            for i, rig in order if start % (2 * block) == 0 else order[::-1]:
                rig.script(steps(count))
                before = cpu_s(rig.server.pid)
                for _ in range(count):
                    rig.turn()
                cpu[i, kind] += cpu_s(rig.server.pid) - before
    out = []
    for i in range(len(rigs)):
        small, big, tool = (cpu[i, kind] * 1000 / n for kind in kinds)
        out.append((small, (big - small) / 360 * 1000, tool))
    return out


STACK_LABEL = "the design card's stack, no agent (server)"
TARGET_MS = 3.0
TOOL_TARGET_MS = 5.0
TTFT_TARGETS_MS = (5.0, 20.0)
LOADED = {
    "stack": STACK_LABEL,
    "relay-lean": "raw ASGI relay on LeanTransport (server)",
}
"""The floor servers that answer any chat request (the others stream a fixed count)."""
SERVERS = ("raw", "fastapi-bare", "fastapi", "relay", "relay-lean", "stack")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--serve", choices=SERVERS)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", default="")
    parser.add_argument("--data", type=Path, default=Path("."), help="a floor server's files")
    parser.add_argument(
        "--only", default="", help="comma-separated floor servers to run (default: all)"
    )
    parser.add_argument(
        "--loaded",
        default=",".join(LOADED),
        help=f"floor servers to run under load besides Courier ({', '.join(LOADED)}; "
        "'none' skips the loaded section)",
    )
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.upstream, args.data)
        return 0
    n = args.requests
    rig = Rig(extra_env=load_limits(args.workers))
    # The same server on httpx's own transport: what the lean one replaced, this run.
    plain = Rig(extra_env={"COURIER_UPSTREAM_TRANSPORT": "httpx"})
    http = httpx.Client(timeout=60)
    stack_floor: Floor | None = None
    try:
        print(f"Layer floors, one streamed request ({n} sequential requests each)")
        servers: list[Turns] = [rig, plain]
        if not args.only or "stack" in args.only.split(","):
            # The stack floor in the same blocks as Courier: its share is the difference.
            stack_floor = Floor("stack", rig)
            servers.append(FloorTurns(stack_floor, rig, http))
        figures = courier_reference(servers, n)
        (ref, ref_chunk, ref_tool), (was, was_chunk, _) = figures[:2]
        stack = figures[2] if len(figures) > 2 else None
        if stack_floor is not None:
            stack_floor.close()
            stack_floor = None
        plain.close()
        print(f"  {'courier, new session (server)':<46} {ref:7.2f} ms   {ref_chunk:6.1f} µs/chunk")
        print(f"  {'courier, tool turn (server)':<46} {ref_tool:7.2f} ms")
        print(
            f"  {'courier on httpx transport (server)':<46} {was:7.2f} ms   "
            f"{was_chunk:6.1f} µs/chunk   (ratio to Courier: request {was / ref:5.3f}x, "
            f"chunk {was_chunk / ref_chunk if ref_chunk > 0 else float('nan'):5.3f}x)"
        )
        if stack is not None:
            print(
                f"  {STACK_LABEL:<46} {stack[0]:7.3f} ms   {stack[1]:6.1f} µs/chunk   "
                f"(ratio to Courier: request {stack[0] / ref:5.3f}x)"
            )
            print(
                f"  {'the same stack, tool turn (server)':<46} {stack[2]:7.3f} ms   "
                f"(ratio to Courier's tool turn {stack[2] / ref_tool:5.3f}x)"
            )
        rows: list[tuple[str, tuple[float, float]]] = []
        for kind, label in (
            ("raw", "uvicorn+httptools+uvloop raw ASGI (server)"),
            ("fastapi-bare", "FastAPI route, no middleware (server)"),
            ("fastapi", "FastAPI route + Courier middleware (server)"),
            ("relay", "raw ASGI relaying via httpx (server)"),
            ("relay-lean", "the same relay on LeanTransport (server)"),
        ):
            if args.only and kind not in args.only.split(","):
                continue
            rig.reset()
            rows.append((label, server_floor(kind, n, rig, http)))
        for label, reads in (
            ("httpx AsyncClient stream read (client)", _httpx_reads),
            ("raw asyncio socket read (client)", _raw_reads),
            ("httpx + Courier's LeanTransport (client)", _lean_reads),
            ("Courier OpenAIChatProvider.stream (client)", _provider_reads),
        ):
            if args.only:
                continue
            rig.reset()
            rows.append((label, client_floor(reads, rig, n)))
        for label, (ms, per_chunk) in rows:
            chunk_share = per_chunk / ref_chunk if ref_chunk > 0 else float("nan")
            print(
                f"  {label:<46} {ms:7.3f} ms   {per_chunk:6.1f} µs/chunk   "
                f"(ratio to Courier: request {ms / ref:5.3f}x, chunk {chunk_share:5.3f}x)"
            )
        if stack is not None:
            for what, target, floor_ms, courier_ms in (
                ("new-session request", TARGET_MS, stack[0], ref),
                ("tool turn", TOOL_TARGET_MS, stack[2], ref_tool),
            ):
                print(
                    f"  issue 10's target is {target:.0f} ms per {what}: the stack alone costs "
                    f"{floor_ms:.2f} ms ({floor_ms / target:.2f}x the target), Courier's own "
                    f"work on top of it {courier_ms - floor_ms:.2f} ms"
                )
        loaded = [k for k in args.loaded.split(",") if k in LOADED]
        if args.workers > 0 and args.loaded != "none":
            print(
                f"Added time to first token at {args.workers} concurrent streams "
                f"({args.seconds:.0f} s each, against the simulator called directly)"
            )
            for name, p50, p99 in loaded_ttft(rig, http, loaded, args.workers, args.seconds):
                print(
                    f"  {LOADED.get(name, 'courier, new session (server)'):<46} "
                    f"added p50 {p50:6.1f} ms   p99 {p99:6.1f} ms   "
                    f"(targets p50 {TTFT_TARGETS_MS[0]:.0f}, p99 {TTFT_TARGETS_MS[1]:.0f})"
                )
    finally:
        http.close()
        if stack_floor is not None:
            stack_floor.close()
        plain.close()
        rig.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
