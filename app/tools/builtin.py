"""Every built-in tool, in the order the registry offers them (plugins follow them).

The list stands apart from the tools: `files.py` builds on `workspace.py`'s path helpers,
so a list of the file tools kept in `workspace.py` had to import `files.py` back.
"""

from __future__ import annotations

from app.tools.files import PATCH, SEARCH_FILES, WRITE_FILE
from app.tools.registry import Tool
from app.tools.terminal import terminal_tools
from app.tools.todo import state_tools
from app.tools.web import web_tools
from app.tools.workspace import LIST_FILES, READ_FILE


def file_tools() -> list[Tool]:
    """The five file tools, in a fixed order."""
    return [LIST_FILES, READ_FILE, WRITE_FILE, PATCH, SEARCH_FILES]


def builtin_tools() -> list[Tool]:
    """Every built-in tool: the file tools, session state, the web, the terminal."""
    return [*file_tools(), *state_tools(), *web_tools(), *terminal_tools()]
