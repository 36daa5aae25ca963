"""Segmented dispatch: a model's batch of tool calls, run as fast as is safe and no faster.

The batch is walked in emission order and cut into runs of calls that may overlap, separated
by barriers that may not. Running everything in parallel lets a `read_file` batched beside
the `patch` it depends on land first; running everything in order wastes the latency of
every independent read. The planner is pure (`plan_batch`) so the schedule can be asserted
in tests without running a tool; `dispatch` executes the same plan.

Rules, in the order they are checked for each call:

- unknown tool, unparseable arguments, a mutating tool without a path scope, a scope that
  returns None or raises, or a claimed path that cannot be canonicalised: a **barrier**. It
  closes the current run and runs alone, so nothing overlaps it in either direction.
- a tool with a path scope reserves each claimed path, canonicalised, as reader or writer.
  Readers share; a writer conflicts with any overlapping reservation (equal, or an ancestor
  by path components). A conflict closes the current run and the call starts the next one.
  A scope that returns `[]` touches nothing and simply joins the run.
- a read-only tool without a path scope joins the current run. Such a tool declares that it
  touches nothing a path-scoped writer could (web fetches, session search); a tool that
  reads workspace files must declare a scope or it will race with writers.

A run of one call is demoted to sequential: there is no concurrency to win.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.providers.base import ToolCall
from app.tools.registry import (
    PathClaim,
    Tool,
    ToolContext,
    ToolOutcome,
    ToolRegistry,
    parse_arguments,
)

log = logging.getLogger(__name__)

MAX_WORKERS = 8

Resolve = Callable[[Path], Path]
OnStart = Callable[[int, ToolCall], None]
OnResult = Callable[[int, ToolCall, ToolOutcome], Awaitable[None]]
Guard = Callable[[ToolCall, Tool, dict[str, Any]], Awaitable[ToolOutcome | None]]
"""Consulted before a known tool runs: None lets it run, an outcome answers instead
(a refusal). It may wait, for a human's approval; the call's slot waits with it."""
InUnit = Callable[[int, ToolCall, Tool, dict[str, Any]], Awaitable[ToolOutcome]]
"""Runs a tool's `in_unit` work inside the transaction that records its result (the
caller's `on_result` then knows the result is already stored)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """Indices into the batch (emission order) that run together, and whether concurrently."""

    calls: tuple[int, ...]
    parallel: bool


@dataclass(frozen=True, slots=True)
class _Prepared:
    tool: Tool | None
    """None when the name is unknown: the registry answers it without invoking anything."""
    args: dict[str, Any] | None
    """None when the tool is unknown or the arguments are unusable."""
    claims: tuple[PathClaim, ...] | None
    """Canonical paths reserved by the call; None marks a barrier."""


def canonical_path(path: Path) -> Path:
    """Follow symlinks and collapse `..`, so two spellings of one file are one reservation.

    Without this, `link/a.txt` and `real/a.txt` would look disjoint and a write through one
    would race a read through the other.
    """
    return Path(os.path.realpath(path))


def _claims(
    tool: Tool, args: dict[str, Any], ctx: ToolContext, resolve: Resolve
) -> tuple[PathClaim, ...] | None:
    if tool.path_scope is None:
        return () if tool.read_only else None
    try:
        scope = tool.path_scope(args, ctx)
    except Exception:
        # Usually the model's mistake (a path outside the workspace); the tool reports it
        # when it runs, alone, as a barrier.
        log.debug("path scope of %s raised; treating the call as a barrier", tool.name)
        return None
    if scope is None:
        return None
    claims: list[PathClaim] = []
    for claim in scope:
        # Relative claims mean "inside the workspace", never the server's working directory.
        raw = claim.path if claim.path.is_absolute() else ctx.workspace / claim.path
        try:
            claims.append(PathClaim(resolve(raw), claim.access))
        except (OSError, RuntimeError, ValueError):
            return None
    return tuple(claims)


def _prepare(
    calls: Sequence[ToolCall], registry: ToolRegistry, ctx: ToolContext, resolve: Resolve
) -> list[_Prepared]:
    prepared: list[_Prepared] = []
    for call in calls:
        tool = registry.get(call.name)
        if tool is None:
            prepared.append(_Prepared(None, None, None))
            continue
        args = parse_arguments(call.arguments)
        if isinstance(args, str):
            prepared.append(_Prepared(tool, None, None))
            continue
        prepared.append(_Prepared(tool, args, _claims(tool, args, ctx, resolve)))
    return prepared


def _overlap(a: Path, b: Path) -> bool:
    # Path.parents compares whole components, so /w/ab is not under /w/a.
    return a == b or a in b.parents or b in a.parents


def _conflicts(claim: PathClaim, reserved: Sequence[PathClaim]) -> bool:
    return any(
        (claim.access == "write" or held.access == "write") and _overlap(claim.path, held.path)
        for held in reserved
    )


def _segments(prepared: Sequence[_Prepared]) -> list[Segment]:
    segments: list[Segment] = []
    run: list[int] = []
    reserved: list[PathClaim] = []

    def close() -> None:
        if run:
            segments.append(Segment(tuple(run), parallel=len(run) > 1))
            run.clear()
            reserved.clear()

    for index, item in enumerate(prepared):
        if item.claims is None:
            close()
            segments.append(Segment((index,), parallel=False))
            continue
        if any(_conflicts(claim, reserved) for claim in item.claims):
            close()
        run.append(index)
        reserved.extend(item.claims)
    close()
    return segments


def plan_batch(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    ctx: ToolContext,
    *,
    resolve: Resolve = canonical_path,
) -> list[Segment]:
    """The schedule `dispatch` would follow: segments in order, each covering whole calls.

    Every index of `calls` appears exactly once, and concatenating the segments gives back
    emission order. Path scopes are called here, so they must be side-effect free.
    """
    return _segments(_prepare(calls, registry, ctx, resolve))


async def dispatch(
    calls: Sequence[ToolCall],
    registry: ToolRegistry,
    ctx: ToolContext,
    *,
    max_workers: int = MAX_WORKERS,
    on_start: OnStart | None = None,
    on_result: OnResult | None = None,
    resolve: Resolve = canonical_path,
    guard: Guard | None = None,
    in_unit: InUnit | None = None,
) -> list[ToolOutcome]:
    """Run the batch by its plan and return one outcome per call, in emission order.

    `on_start(index, call)` fires as a call begins (after it wins a worker) and
    `on_result(index, call, outcome)` as it ends, so the caller can persist results and
    emit progress while slower siblings are still running. A callback that raises is a bug
    in the caller: it cancels the rest of the batch and propagates. `in_unit` runs a tool
    that has `in_unit` work instead of its handler (see `InUnit`).

    Cancelling the awaiting task cancels the calls in flight and propagates at once; calls
    that already reported through `on_result` are the only ones with outcomes.
    """
    if max_workers < 1:
        raise ValueError("max_workers must be at least 1")
    prepared = _prepare(calls, registry, ctx, resolve)
    outcomes: list[ToolOutcome | None] = [None] * len(calls)
    workers = asyncio.Semaphore(max_workers)

    async def run_one(index: int) -> None:
        call, item = calls[index], prepared[index]
        if on_start is not None:
            on_start(index, call)
        if item.tool is None or item.args is None:
            # The registry owns the wording of unknown-name and bad-argument errors.
            outcome = await registry.run(call, ctx)
        else:
            refused = await guard(call, item.tool, item.args) if guard is not None else None
            if refused is not None:
                outcome = refused
            elif in_unit is not None and item.tool.in_unit is not None:
                outcome = await in_unit(index, call, item.tool, item.args)
            else:
                outcome = await registry.invoke(item.tool, item.args, ctx)
        outcomes[index] = outcome
        if on_result is not None:
            await on_result(index, call, outcome)

    async def run_bounded(index: int) -> None:
        async with workers:
            await run_one(index)

    for segment in _segments(prepared):
        if not segment.parallel:
            for index in segment.calls:
                await run_one(index)
            continue
        try:
            # A TaskGroup cancels the siblings when the awaiting task is cancelled or one
            # of them fails, so no call outlives the dispatch that started it.
            async with asyncio.TaskGroup() as group:
                for index in segment.calls:
                    group.create_task(run_bounded(index))
        except BaseExceptionGroup as failed:
            # Callers expect the exception itself, not a group of one.
            raise failed.exceptions[0] from failed

    finished = [outcome for outcome in outcomes if outcome is not None]
    assert len(finished) == len(calls), "every call in the plan runs exactly once"
    return finished
