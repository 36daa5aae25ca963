"""The Anthropic wire's hot path: CPU per request and per chunk, before and after, one run.

Issue 10 asks for the upstream body encoded and the stream parsed with orjson, one pooled
client per upstream and at most 40 µs of CPU per chunk. This prints:

* `server`  Courier's own server process (CPU read from /proc, as benchmarks/hot_path.py)
            per new-session request of 40 chunks and per chunk (from 400-chunk replies), for
            a profile on the OpenAI wire (the reference every ratio is against), a profile
            on the Anthropic wire on Courier's `LeanTransport`, the same with
            `COURIER_UPSTREAM_TRANSPORT=httpx` (the SDK's own httpx2/httpcore2 transport),
            and the former Anthropic adapter: this script's `--serve-former` runs the
            server with `AnthropicProvider.stream` replaced by the SDK's typed call on the
            SDK's own transport (tests/support/sdk_reference.py), measured in the same run;
* `client`  in this process under uvloop, against the simulator: the adapter's former
            path (the SDK's typed `messages.create(stream=True)`, a pydantic model per
            event dumped back to a dict; tests/support/sdk_reference.py), and the current
            `AnthropicProvider.stream` on the SDK's default transport and on the shared
            lean client, for a first request and for one 200 messages into a session;
* `sdk`     the SDK's own CPU per call, what keeping it as the client costs: `post()` of
            a pre-encoded body over an httpx2 transport that answers at once, against the
            same request built and sent on the bare httpx2 client.

Figures and ratios only; nothing is asserted (the machine is shared and noisy).

    .venv/bin/python benchmarks/anthropic_wire.py [--requests 200] [--only server,client,sdk]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from _harness import REPO_ROOT
from hot_path import Rig, text_of
from hot_path_floors import courier_reference

sys.path.insert(0, str(REPO_ROOT))

from app.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderEvent,
    SystemBlock,
    UserMessage,
)

WARM = 10
KEY = "bench"


def _request(history: int) -> ModelRequest:
    """A first request, or one `history` messages into a session (stable objects, as a
    leased session's projection hands the same ones to every call)."""
    messages: list[UserMessage | AssistantMessage] = []
    for i in range(history // 2):
        messages.append(UserMessage(f"Question {i}: " + text_of(30)))
        messages.append(AssistantMessage(f"Answer {i}: " + text_of(60)))
    messages.append(UserMessage("Say something."))
    return ModelRequest(
        # Not a real model name: the SDK's typed call warns about deprecated ones.
        model="claude-sim",
        system=(SystemBlock("You are a careful assistant. " * 40, cache=True),),
        messages=tuple(messages),
    )


Streamer = Callable[[ModelRequest], AsyncIterator[ProviderEvent]]


async def _typed(base: str) -> tuple[Streamer, Callable[[], Awaitable[None]]]:
    import anthropic

    from tests.support.sdk_reference import sdk_typed_stream

    client = anthropic.AsyncAnthropic(base_url=base, api_key=KEY, max_retries=0, timeout=30)
    return (lambda request: sdk_typed_stream(client, request)), client.close


async def _provider(base: str, *, lean: bool) -> tuple[Streamer, Callable[[], Awaitable[None]]]:
    from app.providers.anthropic import AnthropicProvider
    from app.providers.clients import UpstreamClients

    clients = UpstreamClients(max_connections=10, lean=lean)
    provider = AnthropicProvider(
        base, KEY, timeout=30, http_client=clients.sdk_client_for_url(base, timeout=30)
    )

    async def close() -> None:
        await provider.aclose()
        await clients.aclose()

    return provider.stream, close


CLIENTS: tuple[
    tuple[str, Callable[[str], Awaitable[tuple[Streamer, Callable[[], Awaitable[None]]]]]], ...
] = (
    ("former path: SDK typed events (client)", _typed),
    ("AnthropicProvider, SDK's transport (client)", lambda base: _provider(base, lean=False)),
    ("AnthropicProvider, LeanTransport (client)", lambda base: _provider(base, lean=True)),
)


def client_cpu(
    make: Callable[[str], Awaitable[tuple[Streamer, Callable[[], Awaitable[None]]]]],
    sim: Rig,
    n: int,
    history: int,
) -> tuple[float, float]:
    """(CPU ms per 40-chunk request, CPU µs per chunk) in this process, under uvloop."""
    import uvloop

    base = f"http://127.0.0.1:{sim.sim_port}"
    request = _request(history)

    async def reads() -> float:
        stream, close = await make(base)
        try:
            for i in range(WARM + n):
                if i == WARM:
                    started = time.process_time()
                async for _event in stream(request):
                    pass
            return time.process_time() - started
        finally:
            await close()

    def run(chunks: int) -> float:
        sim.script([{"reply": {"text": text_of(chunks)}}] * (n + WARM))
        return uvloop.run(reads()) * 1000 / n

    small, big = run(40), run(400)
    return small, (big - small) / 360 * 1000


def sdk_overhead(n: int) -> tuple[float, float]:
    """(µs per SDK `post()`, µs per bare httpx2 build and send), CPU, under uvloop."""
    import anthropic
    import httpx2
    import uvloop

    class Instant(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            headers = {"content-type": "text/event-stream"}
            return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(b""))

    body = b"{}"  # nothing parses it
    url = "http://upstream.invalid/v1/messages"
    headers = {"content-type": "application/json"}

    async def run() -> tuple[float, float]:
        http = httpx2.AsyncClient(transport=Instant())
        sdk = anthropic.AsyncAnthropic(
            base_url="http://upstream.invalid", api_key=KEY, max_retries=0, http_client=http
        )

        async def via_sdk() -> None:
            response = await sdk.post(
                "/v1/messages", cast_to=httpx2.Response, content=body, stream=True
            )
            await response.aclose()

        async def bare() -> None:
            request = http.build_request("POST", url, content=body, headers=headers)
            await (await http.send(request, stream=True)).aclose()

        out = []
        for call in (via_sdk, bare):
            for _ in range(WARM * 10):
                await call()
            started = time.process_time()
            for _ in range(n):
                await call()
            out.append((time.process_time() - started) / n * 1e6)
        await http.aclose()
        return out[0], out[1]

    return uvloop.run(run())


def serve_former() -> int:
    """`courier serve`, its Anthropic adapter streaming through the SDK's typed call."""
    from app import cli
    from app.providers.anthropic import AnthropicProvider
    from tests.support.sdk_reference import former_provider_stream

    AnthropicProvider.stream = former_provider_stream  # type: ignore[method-assign]
    return cli.main(["serve"])


def _line(label: str, ms: float, chunk: float, ref: tuple[float, ...] | None) -> None:
    ratio = ""
    if ref is not None:
        share = chunk / ref[1] if ref[1] > 0 else float("nan")
        ratio = f"   (ratio to {'baseline'}: request {ms / ref[0]:5.3f}x, chunk {share:5.3f}x)"
    print(f"  {label:<50} {ms:7.3f} ms   {chunk:6.1f} µs/chunk{ratio}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--only", default="server,client,sdk")
    parser.add_argument("--serve-former", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_former:
        return serve_former()
    only = set(args.only.split(","))
    n = args.requests
    if "server" in only:
        print(f"Courier server CPU, new-session request ({n} sequential requests each)")
        rigs = [
            Rig(wire="openai"),
            Rig(wire="anthropic"),
            Rig(extra_env={"COURIER_UPSTREAM_TRANSPORT": "httpx"}, wire="anthropic"),
            # The SDK's own transport is what the former adapter ran on.
            Rig(
                extra_env={"COURIER_UPSTREAM_TRANSPORT": "httpx"},
                wire="anthropic",
                argv=(str(Path(__file__).resolve()), "--serve-former"),
            ),
        ]
        try:
            figures = courier_reference(rigs, n)
        finally:
            for rig in rigs:
                rig.close()
        labels = (
            "OpenAI wire, LeanTransport (baseline)",
            "Anthropic wire, LeanTransport",
            "Anthropic wire, COURIER_UPSTREAM_TRANSPORT=httpx",
            "Anthropic wire, former adapter (SDK typed events)",
        )
        for label, (ms, chunk, _tool) in zip(labels, figures, strict=True):
            _line(label, ms, chunk, figures[0])
    if "client" in only:
        sim = Rig(wire="anthropic")
        try:
            for history in (0, 200):
                print(
                    f"Adapter CPU in this process, {n} sequential requests each, "
                    f"{history} messages of history (baseline: the former path)"
                )
                rows: list[tuple[str, tuple[float, float]]] = []
                for label, make in CLIENTS:
                    sim.reset()
                    rows.append((label, client_cpu(make, sim, n, history)))
                for label, (ms, chunk) in rows:
                    _line(label, ms, chunk, rows[0][1])
        finally:
            sim.close()
    if "sdk" in only:
        sdk, bare = sdk_overhead(n * 10)
        print(f"The SDK as the client, CPU per call ({n * 10} calls, no network)")
        print(
            f"  SDK post(), pre-encoded body   {sdk:6.0f} µs   bare httpx2 build+send "
            f"{bare:6.0f} µs   (ratio {sdk / bare:4.2f}x: {sdk - bare:.0f} µs the SDK's own)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
