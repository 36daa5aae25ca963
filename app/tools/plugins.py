"""Operator-supplied tools, named as `module:attribute` in settings read at startup."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from app.tools.registry import Tool


class PluginError(ValueError):
    pass


def load_plugin_tools(specs: Iterable[str]) -> list[Tool]:
    """Import each `module:attribute`; the attribute is a Tool or an iterable of Tools."""
    tools: list[Tool] = []
    for spec in specs:
        module_name, _, attr = spec.strip().partition(":")
        if not module_name or not attr:
            raise PluginError(f"tool plugin {spec!r} must look like 'package.module:attribute'")
        try:
            value = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"tool plugin {spec!r} could not be loaded: {exc}") from None
        found = [value] if isinstance(value, Tool) else list(value)
        if not all(isinstance(t, Tool) for t in found):
            raise PluginError(f"tool plugin {spec!r} is not a Tool or a list of Tools")
        tools.extend(found)
    return tools
