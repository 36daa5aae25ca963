"""The upstream SSE decoder's fast path (whole LF-delimited `data:` events) against its
line-by-line path: every split of a mixed stream must decode to the same events."""

from __future__ import annotations

from app.providers.sse_decoder import SSEDecoder, SSEEvent

MIXED = (
    b'data: {"a": 1}\n\n'
    b'data: {"t": "h\xc3\xa9llo \xe2\x98\x83"}\n\n'
    b": keepalive\n\n"
    b'event: error\ndata: {"b":\ndata: 2}\n\n'
    b"\n\n\n"
    b"data:no-space\n\n"
    b"data:  two spaces\n\n"
    b"id: 7\ndata: with id\n\n"
    b'data: {"c": 3}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent('{"a": 1}'),
    SSEEvent('{"t": "héllo ☃"}'),
    SSEEvent('{"b":\n2}', event="error"),
    SSEEvent("no-space"),
    SSEEvent(" two spaces"),
    SSEEvent("with id"),
    SSEEvent('{"c": 3}'),
    SSEEvent("[DONE]"),
]


def _decode(chunks: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    return events + decoder.close()


def test_every_two_and_three_way_split_decodes_alike() -> None:
    assert _decode([MIXED]) == EXPECTED
    for first in range(len(MIXED)):
        assert _decode([MIXED[:first], MIXED[first:]]) == EXPECTED
    for first in range(0, len(MIXED), 7):
        for second in range(first, len(MIXED), 5):
            parts = [MIXED[:first], MIXED[first:second], MIXED[second:]]
            assert _decode(parts) == EXPECTED
    assert _decode([MIXED[i : i + 1] for i in range(len(MIXED))]) == EXPECTED


def test_fast_path_after_the_first_chunk_and_line_endings_switching() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n\n") == [SSEEvent("one")]
    assert decoder.feed(b"data: two\n\ndata: thr") == [SSEEvent("two")]
    assert decoder.feed(b"ee\n\ndata: four\r\n\r\ndata: five\n\n") == [
        SSEEvent("three"),
        SSEEvent("four"),
        SSEEvent("five"),
    ]
    # A pending multi-line event across chunks stays on the line path until it ends.
    assert decoder.feed(b"data: a\n") == []
    assert decoder.feed(b"data: b\n\ndata: c\n\n") == [SSEEvent("a\nb"), SSEEvent("c")]


def test_unterminated_events_are_flushed_at_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: one\n\ndata: x\ndata: y") == [SSEEvent("one")]
    assert decoder.close() == [SSEEvent("x\ny")]


def test_a_byte_order_mark_is_dropped_however_it_is_split() -> None:
    stream = b"\xef\xbb\xbf" + MIXED
    for first in range(8):
        assert _decode([stream[:first], stream[first:]]) == EXPECTED
    assert _decode([stream[i : i + 1] for i in range(len(stream))]) == EXPECTED
    # Only a leading one: later, the same bytes are data.
    assert _decode([b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\n"]) == [SSEEvent("a")]
