"""A session's tool schemas: computed once, serialised deterministically, rebuilt by name.

Schemas ride at the very front of every request, so a byte of drift (a dict ordered
differently, a tool that flickered unavailable) re-prices the whole prompt. The snapshot
is frozen per session; `rebuild_tool_snapshot` is the only way to refresh it, and it
records the refresh as a deliberate cache break.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable
from weakref import WeakKeyDictionary

from app.config import Profile
from app.db.store import Store
from app.providers.base import ToolSpec
from app.tools.mcp.names import is_mcp_name
from app.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

TOOL_REBUILD = "tool_snapshot_rebuild"
MCP_TOOLS_CHANGED = "mcp_tools_changed"
MAX_MEMO = 64
EMPTY = "[]"
"""A snapshot (or an MCP portion) with no tools."""


def serialise_specs(specs: Iterable[ToolSpec]) -> str:
    payload = [
        {"name": s.name, "description": s.description, "parameters": s.parameters}
        for s in sorted(specs, key=lambda spec: spec.name)
    ]
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_snapshots: WeakKeyDictionary[ToolRegistry, dict[tuple[int, tuple[str, ...]], str]] = (
    WeakKeyDictionary()
)


def snapshot_tools(registry: ToolRegistry, toolsets: Iterable[str]) -> str:
    """The schemas of the tools available now, serialised; memoised per registry version
    and set of names.

    Tools are frozen and a registry only replaces a tool by bumping its version (an MCP
    server's new listing), so the same version and names give the same bytes: every new
    session asked, and encoding the whole toolbox was a tenth of the writer thread's work
    per request. Availability still decides per call, through the names."""
    names = tuple(registry.names(toolsets))
    known = _snapshots.setdefault(registry, {})
    key = (registry.version, names)
    found = known.get(key)
    if found is None:
        if len(known) >= MAX_MEMO:
            known.clear()
        tools = (registry.get(name) for name in names)
        found = known[key] = serialise_specs(t.spec() for t in tools if t is not None)
    return found


def session_toolsets(registry: ToolRegistry, profile: Profile, owner: str) -> tuple[str, ...]:
    """The profile's toolsets and the MCP servers that offer it to this owner's key."""
    return (*profile.toolsets, *registry.extra_toolsets(profile.name, owner))


@functools.lru_cache(maxsize=256)
def mcp_portion(snapshot: str) -> str:
    """The MCP tools of a snapshot, serialised as `snapshot_tools` would serialise them."""
    return serialise_specs(s for s in specs_from_snapshot(snapshot) if is_mcp_name(s.name))


def with_mcp_portion(snapshot: str, portion: str) -> str:
    """`snapshot` with its MCP tools replaced by those of `portion`."""
    kept = [s for s in specs_from_snapshot(snapshot) if not is_mcp_name(s.name)]
    return serialise_specs([*kept, *specs_from_snapshot(portion)])


@functools.lru_cache(maxsize=64)
def specs_from_snapshot(snapshot: str) -> tuple[ToolSpec, ...]:
    """The specs a snapshot holds; memoised, since every turn of a session rebuilds its
    tool list from the same string. Callers read the specs, never change them."""
    return tuple(
        ToolSpec(name=t["name"], description=t["description"], parameters=t["parameters"])
        for t in json.loads(snapshot)
    )


@functools.lru_cache(maxsize=256)
def snapshot_names(snapshot: str) -> tuple[str, ...]:
    """The snapshot's tool names; memoised, since every turn asks (the allowlist, the
    stable tier) and a session's snapshot is the same string turn after turn."""
    return tuple(t["name"] for t in json.loads(snapshot))


def rebuild_tool_snapshot(
    store: Store,
    *,
    session_id: str,
    lease: str,
    registry: ToolRegistry,
    toolsets: Iterable[str],
    why: str,
) -> str:
    """Refresh a session's schemas: an explicit, logged cache break."""
    snapshot = snapshot_tools(registry, toolsets)
    log.warning(
        "session %s: rebuilding its tool snapshot (%s); the prompt cache breaks", session_id, why
    )
    store.set_tool_snapshot(
        session_id=session_id, lease=lease, snapshot=snapshot, reason=TOOL_REBUILD
    )
    return snapshot
