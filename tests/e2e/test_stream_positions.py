"""Every chat-completion frame carries an SSE `id` (the turn's sequence number), and a
retry that sends one back as `Last-Event-ID` receives exactly the frames it missed."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai

from tests.support.server import Server
from tests.support.sim import Simulator

WORDS = "one two three four five six seven eight"
BODY: dict[str, Any] = {
    "model": "courier",
    "stream": True,
    "stream_options": {"include_usage": True},  # the end is three frames: N.1, N.2, N.3
    "messages": [{"role": "user", "content": "count"}],
}


def _stream(server: Server, body: dict[str, Any], **headers: str) -> httpx.Response:
    resp = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**headers),
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    return resp


def _frames(body: bytes) -> list[bytes]:
    parts = body.split(b"\r\n\r\n")
    assert parts[-1] == b""
    return [part + b"\r\n\r\n" for part in parts[:-1]]


def _id(frame: bytes) -> str:
    found = re.match(rb"id: ([0-9.]+)\r\n", frame)
    assert found is not None, frame
    return found[1].decode()


def test_a_reattach_from_every_id_yields_exactly_the_missing_frames(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": WORDS}}])
    key = {"Idempotency-Key": "positions-1"}
    whole = _stream(server, BODY, **key).content
    frames = _frames(whole)
    ids = [_id(frame) for frame in frames]
    assert ids[0] == "0" and b'"role":"assistant"' in frames[0]
    end = ids[-1].partition(".")[0]
    assert ids[-3:] == [f"{end}.{k}" for k in (1, 2, 3)]
    assert frames[-1].endswith(b"data: [DONE]\r\n\r\n")
    assert len(set(ids)) == len(ids)
    for at, last_id in enumerate(ids):
        again = _stream(server, BODY, **key, **{"Last-Event-ID": last_id}).content
        assert again == b"".join(frames[at + 1 :]), last_id
    # Without the header a reattach replays the whole stream, role chunk included.
    assert _stream(server, BODY, **key).content == whole
    sim.assert_script_done()  # one turn ran, however often it was read


def test_a_new_turn_ignores_a_position_and_a_malformed_one_is_refused(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "fresh"}}])
    body = {**BODY, "messages": [{"role": "user", "content": "new question"}]}
    fresh = _frames(_stream(server, body, **{"Last-Event-ID": "7"}).content)
    assert _id(fresh[0]) == "0"  # a position only means something on its own turn
    bad = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**{"Last-Event-ID": "seven"}),
        timeout=30,
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "Last-Event-ID"
    sim.assert_script_done()


def test_the_openai_sdk_still_parses_numbered_frames(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": WORDS}}])
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=server.api_key)
    stream = client.chat.completions.create(
        model="courier",
        messages=[{"role": "user", "content": "count for the sdk"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == WORDS
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
