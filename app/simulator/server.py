"""The simulator's HTTP app: both model wires, `/v1/models`, and the `/_sim/*` controls.

Control endpoints (JSON, no auth):

* `POST /_sim/script`   body: list of steps (or `{"steps": [...]}`) -> `{"loaded": n}`;
  replaces the current script; a malformed step is a 400 naming it.
* `GET  /_sim/script`   -> `{"remaining": int, "failures": [str, ...]}`.
* `GET  /_sim/requests` -> `[{"path", "body", "headers", "time"}, ...]` for every `/v1/*`
  request in arrival order; `body` is the raw text as received, `time` the simulated clock.
  `?path=/v1/messages` keeps only that path.
* `GET  /_sim/connections` -> `{"connections": n}`: distinct client TCP connections that
  carried a model request, so a test can prove the upstream connection is reused.
* `POST /_sim/reset`    clears script, failures, requests, connections and cache, restores
  the startup settings and the clock offset.
* `POST /_sim/reset`    clears script, failures, requests and cache, restores the startup
  settings and the clock offset.
* `GET  /_sim/stats`    -> `{"model_requests": int, "disconnects": int}`: model requests
  taken (auth passed, body parsed) and how many of them the client abandoned before the
  response was complete (a hung-up stream, or a non-streamed call cut while it waited).
* `GET  /_sim/disconnects` -> `{"count": int, "last_at": float | null}`: the same count and
  the wall-clock time (`time.time()`) the last abandonment was seen, for latency benchmarks.
* `POST /_sim/clock`    `{"advance": seconds}` moves the simulated clock -> `{"now": float}`.
* `POST /_sim/config`   partial settings (see `SimulatorConfig`) -> the full settings;
  `GET /_sim/config` reads them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import Headers

from app.ops import ports
from app.simulator.anthropic_wire import AnthropicWire
from app.simulator.anthropic_wire import parse as parse_anthropic
from app.simulator.cache import PromptCache, SimClock
from app.simulator.config import ConfigError, SimulatorConfig
from app.simulator.openai_wire import OpenAIWire
from app.simulator.output import Output, build_output
from app.simulator.policy import demo_reply
from app.simulator.request import SimError, SimRequest, error_kind_for_status
from app.simulator.script import Fault, Reply, Script, ScriptError, check_expectations, parse_script
from app.simulator.streaming import INCOMPLETE_RESPONSE_LOG, FrameStream, Pacing
from app.simulator.wire import Frame, WireFormat

FAILURE_PREFIX = "simulator: unexpected request: "
OPENAI = OpenAIWire()
ANTHROPIC = AnthropicWire()
MAX_RECORDED = 5000
"""Oldest recorded requests are dropped past this, so a long demo does not grow forever."""
_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
_FAULT_MESSAGES = {
    429: "Rate limit exceeded (simulated)",
    529: "Overloaded",
    500: "Internal server error",
}


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do for one model request: the reply and any fault, and the step number."""

    step: int
    reply: Reply
    fault: Fault | None = None


class SimState:
    """Everything a test can observe or reset; one per app."""

    def __init__(self, config: SimulatorConfig) -> None:
        self.initial = config
        self.reset()

    def reset(self) -> None:
        self.config = self.initial
        self.script: Script | None = None
        self.failures: list[str] = []
        self.requests: list[dict[str, Any]] = []
        self.cache = PromptCache()
        self.clock = SimClock()
        self.seq = 0
        self.connections: set[tuple[str, int]] = set()
        self.model_requests = 0
        self.disconnects = 0
        self.last_disconnect_at: float | None = None

    def disconnected(self) -> None:
        self.disconnects += 1
        self.last_disconnect_at = time.time()

    def record(self, request: Request, raw: bytes) -> None:
        if request.client is not None:
            # A client's (address, port) names one TCP connection for its whole life.
            self.connections.add((request.client.host, request.client.port))
        self.requests.append(
            {
                "path": request.url.path,
                "body": raw.decode("utf-8", errors="replace"),
                "headers": dict(request.headers),
                "time": self.clock.now(),
            }
        )
        if len(self.requests) > MAX_RECORDED:
            del self.requests[0]

    def fail(self, why: str) -> SimError:
        message = FAILURE_PREFIX + why
        self.failures.append(message)
        # Tells SDK clients not to retry: a retry would only consume (or miss) another step.
        return SimError(500, "api_error", message, headers={"x-should-retry": "false"})

    def plan(self, request: SimRequest, path: str) -> Plan:
        self.seq += 1
        if self.script is None:
            return Plan(self.seq, demo_reply(request))
        taken = self.script.take()
        if taken is None:
            used = len(self.script.steps)
            raise self.fail(f"script exhausted ({used} steps used) at POST {path}")
        number, step = taken
        problem = check_expectations(step.expect, request)
        if problem is not None:
            raise self.fail(f"step {number} (POST {path}): {problem}")
        return Plan(number, step.reply, step.fault)


# ------------------------------------------------------------------------------ helpers


def _credential(headers: Headers) -> str | None:
    api_key = headers.get("x-api-key", "").strip()
    if api_key:
        return api_key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def authorize(config: SimulatorConfig, headers: Headers) -> None:
    key = _credential(headers)
    if key is None:
        raise SimError(401, "authentication", "Missing API key: send x-api-key or Bearer auth.")
    if config.required_key is not None and key != config.required_key:
        raise SimError(401, "authentication", "Incorrect API key provided (invalid x-api-key).")


def parse_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise SimError(
            400, "invalid_request", f"The request body is not valid JSON: {exc}"
        ) from exc


BIG_BODY_BYTES = 256 * 1024
"""Bodies past this are parsed on a worker thread."""


def parse_request(wire: WireFormat, raw: bytes) -> SimRequest:
    body = parse_json(raw)
    try:
        return wire.parse(body)
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        # A body shaped in a way the parser did not foresee: a 400 the test can read.
        raise SimError(400, "invalid_request", f"malformed request body: {exc!r}") from exc


def error_response(wire: WireFormat, error: SimError) -> JSONResponse:
    return JSONResponse(wire.error_body(error), status_code=error.status, headers=error.headers)


def fault_error(fault: Fault, status: int) -> SimError:
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        seconds = fault.retry_after
        headers["retry-after"] = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
    message = fault.message or _FAULT_MESSAGES.get(status, f"Simulated error {status}")
    return SimError(status, error_kind_for_status(status), message, headers=headers)


def _garbled(frame: Frame) -> Frame:
    """The frame with its data line's JSON cut in half; its event line, if any, intact."""
    head, _, data = frame.data.rstrip(b"\n").partition(b"data: ")
    return Frame(head + b"data: " + data[: max(1, len(data) // 2)] + b"\n\n", frame.tokens)


def _stream(
    state: SimState, wire: WireFormat, frames: list[Frame], fault: Fault | None
) -> FrameStream:
    if fault is not None and fault.status is not None and fault.after_events is not None:
        # A mid-stream error: the status went out as 200, so the error travels as an event.
        error = fault_error(fault, fault.status)
        frames = [*frames[: fault.after_events], wire.error_frame(error)]
    if fault is not None and fault.garble_event is not None and fault.garble_event < len(frames):
        at = fault.garble_event
        frames = [*frames[:at], _garbled(frames[at]), *frames[at + 1 :]]
    drop = fault.drop_after_events if fault is not None else None
    stall = None
    if fault is not None and fault.stall_after_events is not None:
        stall = (fault.stall_after_events, fault.stall_ms / 1000)
    pacing = Pacing.from_config(state.config)
    return FrameStream(
        frames,
        pacing,
        drop_after=drop,
        headers=_SSE_HEADERS,
        on_disconnect=state.disconnected,
        stall=stall,
    )


class _Hungup(Exception):
    """The client went away while the simulated model was still working."""


_WATCH_INTERVAL_S = 0.02


async def _wait(seconds: float, http: Request | None, state: SimState) -> None:
    """Sleep like a working model, noticing a client that hangs up meanwhile.

    A plain sleep would let a test's disconnect go unseen until the body was written, so
    "did the server cancel its upstream call" could not be counted.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return
        await asyncio.sleep(min(left, _WATCH_INTERVAL_S))
        if http is not None and await http.is_disconnected():
            state.disconnected()
            raise _Hungup()


async def _whole(
    state: SimState,
    body: dict[str, Any],
    output: Output,
    fault: Fault | None,
    http: Request | None = None,
) -> Response:
    pacing = Pacing.from_config(state.config)
    await _wait(pacing.total(output.output_tokens), http, state)
    if fault is None or fault.drop_after_events is None:
        return JSONResponse(body)
    # Announce the full length, send half of it, then drop the connection.
    data = json.dumps(body).encode()
    headers = {"content-length": str(len(data))}
    half = [Frame(data[: len(data) // 2])]
    no_pace = Pacing(0.0, 0.0)
    return FrameStream(half, no_pace, drop_after=1, media_type="application/json", headers=headers)


async def respond(
    state: SimState,
    wire: WireFormat,
    request: SimRequest,
    plan: Plan,
    http: Request | None = None,
) -> Response:
    fault = plan.fault
    if fault is not None and fault.delay_ms > 0:
        await _wait(fault.delay_ms / 1000, http, state)
    in_stream = fault is not None and fault.after_events is not None and request.stream
    if fault is not None and fault.status is not None and not in_stream:
        raise fault_error(fault, fault.status)
    config = state.config
    if request.prompt_tokens > config.context_window:
        raise wire.overflow_error(request.prompt_tokens, config.context_window)
    usage = wire.prompt_usage(state.cache, state.clock.now(), request, config)
    output = build_output(
        plan.reply,
        max_tokens=request.max_tokens,
        stop=request.stop,
        id_prefix=wire.id_prefix,
        step=plan.step,
    )
    if request.stream:
        return _stream(state, wire, wire.stream_frames(request, output, usage, state.seq), fault)
    body = wire.response_body(request, output, usage, state.seq)
    return await _whole(state, body, output, fault, http)


async def serve_model(state: SimState, wire: WireFormat, http: Request) -> Response:
    raw = await http.body()
    state.record(http, raw)
    try:
        authorize(state.config, http.headers)
        if len(raw) > BIG_BODY_BYTES:
            # A real upstream keeps streaming to its other clients while it reads a
            # 10,000-message request; parsed here it silenced them (and made Courier's
            # `benchmarks/loop_stall.py` measure the simulator). A script step goes to the
            # request parsed first, which for requests sent one after another is the same.
            request = await asyncio.to_thread(parse_request, wire, raw)
        else:
            request = parse_request(wire, raw)
        plan = state.plan(request, http.url.path)
        state.model_requests += 1
        return await respond(state, wire, request, plan, http)
    except SimError as error:
        return error_response(wire, error)
    except _Hungup:
        # Nobody is listening; any response object will do, it is never written.
        return Response(status_code=499)


# ------------------------------------------------------------------------------ routes


def _models_body(config: SimulatorConfig, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        model = {
            "type": "model",
            "id": config.model,
            "display_name": "Courier Simulator",
            "created_at": "2025-01-01T00:00:00Z",
            "lifecycle": "active",
            "max_input_tokens": config.context_window,
        }
        return {
            "data": [model],
            "has_more": False,
            "first_id": config.model,
            "last_id": config.model,
        }
    model = {"id": config.model, "object": "model", "created": 1735689600, "owned_by": "courier"}
    return {"object": "list", "data": [model]}


class _CountingWire(AnthropicWire):
    """`count_tokens` takes a Messages body without `max_tokens`."""

    def parse(self, body: Any) -> SimRequest:
        return parse_anthropic(body, require_max_tokens=False)


_COUNTING = _CountingWire()


def _add_model_routes(app: FastAPI, state: SimState) -> None:
    @app.post("/v1/chat/completions")
    async def chat_completions(http: Request) -> Response:
        return await serve_model(state, OPENAI, http)

    @app.post("/v1/messages")
    async def messages(http: Request) -> Response:
        return await serve_model(state, ANTHROPIC, http)

    @app.post("/v1/messages/count_tokens")
    async def count_tokens(http: Request) -> Response:
        raw = await http.body()
        state.record(http, raw)
        try:
            authorize(state.config, http.headers)
            request = parse_request(_COUNTING, raw)
        except SimError as error:
            return error_response(ANTHROPIC, error)
        return JSONResponse({"input_tokens": request.prompt_tokens})

    @app.get("/v1/models")
    async def models(http: Request) -> Response:
        state.record(http, b"")
        anthropic = "anthropic-version" in http.headers
        try:
            authorize(state.config, http.headers)
        except SimError as error:
            return error_response(ANTHROPIC if anthropic else OPENAI, error)
        return JSONResponse(_models_body(state.config, anthropic))


def _bad_control(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def _add_control_routes(app: FastAPI, state: SimState) -> None:
    @app.post("/_sim/script")
    async def load_script(http: Request) -> Response:
        try:
            steps = parse_script(json.loads(await http.body()))
        except (ValueError, ScriptError) as exc:
            return _bad_control(str(exc))
        state.script = Script(steps)
        return JSONResponse({"loaded": len(steps)})

    @app.get("/_sim/script")
    async def script_status() -> Response:
        remaining = state.script.remaining if state.script is not None else 0
        return JSONResponse({"remaining": remaining, "failures": list(state.failures)})

    @app.get("/_sim/requests")
    async def recorded(path: str | None = None) -> Response:
        rows = [r for r in state.requests if path is None or r["path"] == path]
        return JSONResponse(rows)

    @app.get("/_sim/connections")
    async def connections() -> Response:
        return JSONResponse({"connections": len(state.connections)})

    @app.get("/_sim/stats")
    async def stats() -> Response:
        counts = {"model_requests": state.model_requests, "disconnects": state.disconnects}
        return JSONResponse(counts)

    @app.get("/_sim/disconnects")
    async def disconnects() -> Response:
        return JSONResponse({"count": state.disconnects, "last_at": state.last_disconnect_at})

    @app.post("/_sim/reset")
    async def reset() -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    @app.post("/_sim/clock")
    async def clock(http: Request) -> Response:
        body = parse_json_or_none(await http.body())
        advance = body.get("advance") if isinstance(body, dict) else None
        if isinstance(advance, bool) or not isinstance(advance, int | float):
            return _bad_control('expected {"advance": seconds}')
        state.clock.advance(float(advance))
        return JSONResponse({"now": state.clock.now(), "offset": state.clock.offset})

    @app.get("/_sim/config")
    async def read_config() -> Response:
        return JSONResponse(asdict(state.config))

    @app.post("/_sim/config")
    async def write_config(http: Request) -> Response:
        body = parse_json_or_none(await http.body())
        if not isinstance(body, dict):
            return _bad_control("expected a JSON object of settings")
        try:
            state.config = state.config.updated(body)
        except ConfigError as exc:
            return _bad_control(str(exc))
        return JSONResponse(asdict(state.config))


def parse_json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def create_app(config: SimulatorConfig | None = None) -> FastAPI:
    app = FastAPI(title="Courier upstream simulator", docs_url=None, redoc_url=None)
    state = SimState(config or SimulatorConfig())
    app.state.sim = state
    _add_model_routes(app, state)
    _add_control_routes(app, state)
    return app


# ------------------------------------------------------------------------------ running


class _DropNoise(logging.Filter):
    """Drop faults end responses early on purpose; uvicorn's complaint about it is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != INCOMPLETE_RESPONSE_LOG


def _listen(host: str, port: int) -> socket.socket:
    # Listening before announcing the port means a client may connect immediately; port 0
    # is one a connection really reaches (app/ops/ports.py).
    return ports.listen(host, port, backlog=2048)  # benchmarks open a thousand streams at once


def run(host: str = "127.0.0.1", port: int = 8643, **config: Any) -> None:
    """Serve until interrupted. `port=0` picks a free port; the chosen URL is printed."""
    settings = SimulatorConfig().updated(config)
    sock = _listen(host, port)
    actual = sock.getsockname()[1]
    server_config = uvicorn.Config(
        create_app(settings), log_level="warning", access_log=False, lifespan="off"
    )
    # After Config: it (re)configures uvicorn's loggers.
    logging.getLogger("uvicorn.error").addFilter(_DropNoise())
    url_host = f"[{host}]" if ":" in host else host
    print(f"courier simulator listening on http://{url_host}:{actual}", flush=True)
    uvicorn.Server(server_config).run(sockets=[sock])
