"""The model requests the Anthropic wire's lean path is held to in both tiers (its encoder
in-process in tests/unit/test_anthropic_lean_wire.py, the bytes it sends the simulator in
tests/e2e/test_anthropic_lean_wire.py): one corpus, so a case added for one is checked by
both."""

from __future__ import annotations

import base64
from typing import Any

from app.providers.base import (
    AssistantMessage,
    Image,
    Message,
    ModelRequest,
    OutputFormat,
    SamplingParams,
    SystemBlock,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)

READ = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def make_request(*messages: Message, **fields: Any) -> ModelRequest:
    return ModelRequest(
        model="claude-sim",
        system=fields.pop("system", (SystemBlock("Be brief."),)),
        messages=messages or (UserMessage("hello"),),
        **fields,
    )


REQUESTS: dict[str, ModelRequest] = {
    "plain": make_request(),
    "everything": make_request(
        UserMessage("look at these", images=(Image(media_type="image/png", data=PIXEL),)),
        AssistantMessage("Reading.", (ToolCall("toolu_1", "read_file", '{"path":"a.txt"}'),)),
        ToolResultMessage("toolu_1", "read_file", 'ünïcode \u2028 \x01 "quoted"', cache=True),
        UserMessage("and https?", images=(Image(url="https://example.com/a.png"),)),
        UserMessage("[instruction]", instruction=True),
        system=(
            SystemBlock("stable prompt " * 50, cache=True),
            SystemBlock(""),
            SystemBlock("volatile"),
        ),
        tools=(READ,),
        tool_choice="read_file",
        parallel_tool_calls=False,
        sampling=SamplingParams(
            temperature=0.25, top_p=0.9, stop=("STOP",), max_tokens=300, user="u-1"
        ),
        output_format=OutputFormat("json_schema", schema={"type": "object"}),
        cache_ttl="1h",
    ),
    "greeting (no user turn)": ModelRequest(
        model="claude-sim", system=(SystemBlock("Greet.", cache=True),), messages=()
    ),
    "assistant first, prefill last": make_request(
        AssistantMessage("Earlier answer."), UserMessage("go on"), AssistantMessage("Sure,")
    ),
    "marker on an empty message": make_request(
        UserMessage("first"), AssistantMessage("", cache=True), UserMessage("second")
    ),
}
