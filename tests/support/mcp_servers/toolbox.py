"""An MCP server for the tests, written with the SDK's own server side (MCPServer).

usage: python toolbox.py stdio | python toolbox.py http PORT

Every call is counted in a file under $HOME (or TOOLBOX_STATE), so a test can read
from outside, across restarts, whether a tool ran at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("toolbox")
READ_ONLY = ToolAnnotations(read_only_hint=True)
PIXEL = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d49484452")).decode()


def _state() -> Path:
    return Path(os.environ.get("TOOLBOX_STATE") or os.environ.get("HOME", ".")) / "toolbox.json"


def _counts() -> dict[str, int]:
    try:
        return dict(json.loads(_state().read_text()))
    except (OSError, ValueError):
        return {}


def _count(tool: str) -> None:
    counts = _counts()
    counts[tool] = counts.get(tool, 0) + 1
    _state().write_text(json.dumps(counts))


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Echo the text back, prefixed so a test can find it."""
    _count("echo")
    return f"toolbox echo: {text}"


@server.tool(annotations=READ_ONLY)
def count() -> str:
    """How many times each tool ran, as JSON."""
    return json.dumps(_counts(), sort_keys=True)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def write_note(text: str) -> str:
    """Pretend to change something outside."""
    _count("write_note")
    return f"noted: {text}"


@server.tool()
def image() -> list[TextContent | ImageContent]:
    """Answer with text and an image."""
    _count("image")
    return [
        TextContent(type="text", text="a picture follows"),
        ImageContent(type="image", data=PIXEL, mime_type="image/png"),
    ]


@server.tool()
def odd_images() -> list[TextContent | ImageContent]:
    """Answer with images no wire may be sent: a type they refuse and broken base64."""
    _count("odd_images")
    svg = base64.b64encode(b"<svg xmlns='http://www.w3.org/2000/svg'/>").decode()
    return [
        TextContent(type="text", text="odd pictures follow"),
        ImageContent(type="image", data=svg, mime_type="image/svg+xml"),
        ImageContent(type="image", data="%%% not base64 %%%", mime_type="image/png"),
    ]


@server.tool()
def fail(reason: str) -> str:
    """Raise, which the SDK turns into an error result."""
    _count("fail")
    raise ValueError(reason)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    _count("slow")
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def crash() -> str:
    """Exit the whole server process in the middle of the call."""
    _count("crash")
    os._exit(3)


@server.tool(annotations=READ_ONLY)
def env_dump() -> str:
    """The names in this server's environment, the sha256 of each value (a test looks for
    a secret's hash: a value itself would be refused on its way upstream), and its HOME
    and working directory."""
    _count("env_dump")
    hashes = sorted(hashlib.sha256(v.encode()).hexdigest() for v in os.environ.values())
    return json.dumps(
        {"names": sorted(os.environ), "hashes": hashes, "home": os.environ.get("HOME"),
         "cwd": os.getcwd()}
    )  # fmt: skip


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown`, announced on both protocol eras' paths."""
    _count("grow")
    if "grown" not in {t.name for t in await server.list_tools()}:

        def grown() -> str:
            """A tool that arrived after the first listing."""
            _count("grown")
            return "grown answers"

        server.add_tool(grown)
    try:
        await ctx.request_context.session.send_tool_list_changed()
    except Exception as exc:  # the 2026-07-28 session refuses the legacy notification
        sys.stderr.write(f"legacy notification not sent: {exc!r}\n")
    await ctx.notify_tools_changed()
    return "grew"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
