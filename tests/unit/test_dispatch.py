"""Segmented dispatch: the plan as a table, then the plan executed against fake tools.

The fakes synchronise with asyncio.Event, never with sleeps: "overlapped" means both calls
had started before either finished, which a timing threshold can only suggest.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.providers.base import ToolCall
from app.tools.dispatch import Segment, dispatch, plan_batch
from app.tools.registry import (
    PathClaim,
    Tool,
    ToolContext,
    ToolError,
    ToolOutcome,
    ToolRegistry,
)

CTX = ToolContext(session_id="s", workspace=Path("/w"))
WAIT_S = 5.0
"""Only a safety net so a broken scheduler fails instead of hanging the suite."""


def _identity(path: Path) -> Path:
    return path


async def _noop(args: dict[str, Any], ctx: ToolContext) -> str:
    return "ok"


def _scope(access: str) -> Callable[[dict[str, Any], ToolContext], list[PathClaim] | None]:
    def scope(args: dict[str, Any], ctx: ToolContext) -> list[PathClaim] | None:
        if args.get("path") == "?":
            return None  # e.g. a shell command whose paths cannot be known
        if args.get("path") == "!":
            raise ToolError("path is outside the workspace")
        return [PathClaim(Path(args["path"]), "write" if access == "write" else "read")]

    return scope


def _tool(
    name: str,
    handler: Callable[[dict[str, Any], ToolContext], Awaitable[str]] = _noop,
    *,
    access: str | None = None,
    read_only: bool = True,
) -> Tool:
    return Tool(
        name=name,
        description=name,
        parameters={"type": "object"},
        handler=handler,
        read_only=read_only and access != "write",
        path_scope=_scope(access) if access else None,
    )


def _registry(**handlers: Callable[[dict[str, Any], ToolContext], Awaitable[str]]) -> ToolRegistry:
    return ToolRegistry(
        [
            _tool("read", handlers.get("read", _noop), access="read"),
            _tool("write", handlers.get("write", _noop), access="write"),
            _tool("fetch", handlers.get("fetch", _noop)),  # read-only, no path scope
            _tool("shell", handlers.get("shell", _noop), read_only=False),  # mutating, no scope
        ]
    )


def _call(spec: str, index: int = 0) -> ToolCall:
    """`read /w/a` -> ToolCall(read, {"path": "/w/a"}); `read {bad` keeps raw arguments."""
    name, _, rest = spec.partition(" ")
    if rest.startswith(("{", "[")):
        arguments = rest
    elif rest:
        arguments = json.dumps({"path": rest})
    else:
        arguments = "{}"
    return ToolCall(id=f"call_{index}", name=name, arguments=arguments)


def _calls(*specs: str) -> list[ToolCall]:
    return [_call(spec, i) for i, spec in enumerate(specs)]


def _plan(*specs: str) -> list[tuple[tuple[int, ...], bool]]:
    segments = plan_batch(_calls(*specs), _registry(), CTX, resolve=_identity)
    return [(s.calls, s.parallel) for s in segments]


# ---------------------------------------------------------------------------- planning

PLANS: list[tuple[str, list[str], list[tuple[tuple[int, ...], bool]]]] = [
    ("readers of one file share", ["read /w/a", "read /w/a"], [((0, 1), True)]),
    (
        "writer after reader on the same file splits",
        ["read /w/a", "write /w/a"],
        [((0,), False), ((1,), False)],
    ),
    (
        "reader after writer on the same file splits",
        ["write /w/a", "read /w/a"],
        [((0,), False), ((1,), False)],
    ),
    ("two writers of one file split", ["write /w/a", "write /w/a"], [((0,), False), ((1,), False)]),
    ("writers of different files share", ["write /w/a", "write /w/b"], [((0, 1), True)]),
    (
        "writer on a directory conflicts with a reader below it",
        ["write /w/a", "read /w/a/b.txt"],
        [((0,), False), ((1,), False)],
    ),
    (
        "reader of a directory conflicts with a writer below it",
        ["read /w/a", "write /w/a/b/c.txt"],
        [((0,), False), ((1,), False)],
    ),
    ("a string prefix is not an ancestor", ["write /w/ab", "read /w/a"], [((0, 1), True)]),
    ("readers of a tree and a file in it share", ["read /w", "read /w/a/b"], [((0, 1), True)]),
    (
        "a conflict starts a new run that keeps only its own reservations",
        ["write /w/a", "read /w/a", "write /w/b"],
        [((0,), False), ((1, 2), True)],
    ),
    (
        "a conflict with an earlier member of the run splits too",
        ["write /w/a", "write /w/b", "read /w/b"],
        [((0, 1), True), ((2,), False)],
    ),
    (
        "unknown tool is a barrier",
        ["read /w/a", "nope", "read /w/b"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    (
        "empty tool name is a barrier",
        ["read /w/a", "read /w/b", "", "read /w/c", "read /w/d"],
        [((0, 1), True), ((2,), False), ((3, 4), True)],
    ),
    (
        "unparseable arguments are a barrier",
        ["fetch", "read {not json", "fetch"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    (
        "arguments that are not an object are a barrier",
        ["fetch", "read [1]", "fetch"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    (
        "a scope of None is a barrier",
        ["read /w/a", "read ?", "read /w/b"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    (
        "a scope that raises is a barrier",
        ["read /w/a", "write !", "read /w/b"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    (
        "a mutating tool without a scope is a barrier",
        ["fetch", "shell", "fetch"],
        [((0,), False), ((1,), False), ((2,), False)],
    ),
    ("read-only tools without a scope join", ["fetch", "read /w/a", "fetch"], [((0, 1, 2), True)]),
    (
        "read-only tools without a scope join a run holding a writer",
        ["write /w/a", "fetch"],
        [((0, 1), True)],
    ),
    ("a run of one is sequential", ["fetch"], [((0,), False)]),
    ("an empty batch has no segments", [], []),
]


@pytest.mark.parametrize(
    ("specs", "expected"), [(specs, want) for _, specs, want in PLANS], ids=[p[0] for p in PLANS]
)
def test_plan(specs: list[str], expected: list[tuple[tuple[int, ...], bool]]) -> None:
    assert _plan(*specs) == expected


def test_plan_returns_segments() -> None:
    plan = plan_batch(_calls("read /w/a", "read /w/b"), _registry(), CTX, resolve=_identity)
    assert plan == [Segment(calls=(0, 1), parallel=True)]


def test_plan_sees_through_symlinks_and_dotdot(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    ctx = ToolContext(session_id="s", workspace=tmp_path)
    calls = [
        ToolCall("c0", "read", json.dumps({"path": str(tmp_path / "link" / "f.txt")})),
        ToolCall("c1", "write", json.dumps({"path": str(real / "x" / ".." / "f.txt")})),
    ]
    assert [s.calls for s in plan_batch(calls, _registry(), ctx)] == [(0,), (1,)]


def test_plan_resolves_relative_claims_in_the_workspace(tmp_path: Path) -> None:
    ctx = ToolContext(session_id="s", workspace=tmp_path)
    calls = [
        ToolCall("c0", "read", json.dumps({"path": "f.txt"})),
        ToolCall("c1", "write", json.dumps({"path": str(tmp_path / "f.txt")})),
    ]
    assert [s.calls for s in plan_batch(calls, _registry(), ctx)] == [(0,), (1,)]


def test_unresolvable_claim_is_a_barrier() -> None:
    def broken(path: Path) -> Path:
        raise OSError("symlink loop")

    plan = plan_batch(_calls("fetch", "read /w/a", "fetch"), _registry(), CTX, resolve=broken)
    assert [(s.calls, s.parallel) for s in plan] == [((0,), False), ((1,), False), ((2,), False)]


# ---------------------------------------------------------------------------- execution


@dataclass
class Trace:
    """An ordered log of tool starts and ends, and a way to wait for one to appear."""

    log: list[str] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def note(self, entry: str) -> None:
        async with self.changed:
            self.log.append(entry)
            self.changed.notify_all()

    async def wait_for(self, entry: str) -> None:
        async def seen() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: entry in self.log)

        await asyncio.wait_for(seen(), WAIT_S)


async def test_two_readers_of_one_file_overlap() -> None:
    trace = Trace()

    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        me, other = args["path"], ("/w/a#1" if args["path"] == "/w/a#0" else "/w/a#0")
        await trace.note(f"start {me}")
        # Sequential execution would deadlock here; the timeout turns that into a failure.
        await trace.wait_for(f"start {other}")
        await trace.note(f"end {me}")
        return me

    # Both claims canonicalise to the same file, so only sharing lets them overlap.
    def same_file(path: Path) -> Path:
        return Path(str(path).split("#")[0])

    calls = [_call("read /w/a#0", 0), _call("read /w/a#1", 1)]
    registry = _registry(read=read)
    assert plan_batch(calls, registry, CTX, resolve=same_file) == [Segment((0, 1), True)]
    outcomes = await dispatch(calls, registry, CTX, resolve=same_file)
    assert outcomes == [ToolOutcome("/w/a#0"), ToolOutcome("/w/a#1")]
    starts = [i for i, e in enumerate(trace.log) if e.startswith("start")]
    ends = [i for i, e in enumerate(trace.log) if e.startswith("end")]
    assert max(starts) < min(ends)


def _file_tools(files: dict[str, str], trace: Trace) -> ToolRegistry:
    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        await trace.note("start read")
        # Yield a few times, so a write scheduled beside this read would get in first.
        for _ in range(5):
            await asyncio.sleep(0)
        content = files[args["path"]]
        await trace.note("end read")
        return content

    async def write(args: dict[str, Any], ctx: ToolContext) -> str:
        await trace.note("start write")
        files[args["path"]] = args["content"]
        await trace.note("end write")
        return "written"

    return _registry(read=read, write=write)


def _write_call(path: str, content: str, index: int) -> ToolCall:
    return ToolCall(f"call_{index}", "write", json.dumps({"path": path, "content": content}))


@pytest.mark.parametrize("repeat", range(3))
async def test_read_then_write_sees_the_old_content(repeat: int) -> None:
    files, trace = {"/w/a": "old"}, Trace()
    calls = [_call("read /w/a", 0), _write_call("/w/a", "new", 1)]
    outcomes = await dispatch(calls, _file_tools(files, trace), CTX, resolve=_identity)
    assert outcomes == [ToolOutcome("old"), ToolOutcome("written")]
    assert trace.log == ["start read", "end read", "start write", "end write"]
    assert files["/w/a"] == "new"


@pytest.mark.parametrize("repeat", range(3))
async def test_write_then_read_sees_the_new_content(repeat: int) -> None:
    files, trace = {"/w/a": "old"}, Trace()
    calls = [_write_call("/w/a", "new", 0), _call("read /w/a", 1)]
    outcomes = await dispatch(calls, _file_tools(files, trace), CTX, resolve=_identity)
    assert outcomes == [ToolOutcome("written"), ToolOutcome("new")]
    assert trace.log == ["start write", "end write", "start read", "end read"]


async def test_results_come_back_in_emission_order_when_the_later_call_finishes_first() -> None:
    trace = Trace()

    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        if args["path"] == "/w/first":
            await trace.wait_for("end /w/second")
        await trace.note(f"end {args['path']}")
        return args["path"]

    started: list[int] = []
    reported: list[tuple[int, str, ToolOutcome]] = []

    async def report(i: int, call: ToolCall, outcome: ToolOutcome) -> None:
        reported.append((i, call.id, outcome))

    outcomes = await dispatch(
        _calls("read /w/first", "read /w/second"),
        _registry(read=read),
        CTX,
        resolve=_identity,
        on_start=lambda i, call: started.append(i),
        on_result=report,
    )
    assert trace.log == ["end /w/second", "end /w/first"]
    assert outcomes == [ToolOutcome("/w/first"), ToolOutcome("/w/second")]
    assert sorted(started) == [0, 1]
    # Reported as they finished, so the caller can persist the fast result at once.
    assert reported == [
        (1, "call_1", ToolOutcome("/w/second")),
        (0, "call_0", ToolOutcome("/w/first")),
    ]


async def test_max_workers_bounds_concurrency() -> None:
    running: set[str] = set()
    peak = 0
    release = asyncio.Event()
    two_running = asyncio.Event()

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        nonlocal peak
        running.add(args["path"])
        peak = max(peak, len(running))
        if len(running) == 2:
            two_running.set()
        await release.wait()
        running.discard(args["path"])
        return args["path"]

    calls = [ToolCall(f"c{i}", "fetch", json.dumps({"path": f"p{i}"})) for i in range(5)]
    task = asyncio.create_task(dispatch(calls, _registry(fetch=fetch), CTX, max_workers=2))
    await asyncio.wait_for(two_running.wait(), WAIT_S)
    # Give any call that wrongly slipped past the bound every chance to start.
    for _ in range(20):
        await asyncio.sleep(0)
    assert len(running) == 2
    release.set()
    outcomes = await asyncio.wait_for(task, WAIT_S)
    assert [o.content for o in outcomes] == [f"p{i}" for i in range(5)]
    assert peak == 2


async def test_default_worker_bound_is_eight() -> None:
    running = 0
    peak = 0
    release = asyncio.Event()
    eight_running = asyncio.Event()

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if running == 8:
            eight_running.set()
        await release.wait()
        running -= 1
        return "ok"

    calls = [ToolCall(f"c{i}", "fetch", "{}") for i in range(12)]
    task = asyncio.create_task(dispatch(calls, _registry(fetch=fetch), CTX))
    await asyncio.wait_for(eight_running.wait(), WAIT_S)
    for _ in range(20):
        await asyncio.sleep(0)
    assert running == 8
    release.set()
    assert len(await asyncio.wait_for(task, WAIT_S)) == 12
    assert peak == 8


async def test_cancellation_cancels_calls_in_flight() -> None:
    trace = Trace()
    cancelled: list[str] = []
    after_barrier: list[str] = []

    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        await trace.note(f"start {args['path']}")
        try:
            await asyncio.Event().wait()  # never set: only cancellation ends this
        except asyncio.CancelledError:
            cancelled.append(args["path"])
            raise
        return "unreachable"

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        after_barrier.append("fetch")
        return "ok"

    calls = _calls("read /w/a", "read /w/b", "shell", "fetch")
    task = asyncio.create_task(
        dispatch(calls, _registry(read=read, fetch=fetch), CTX, resolve=_identity)
    )
    await trace.wait_for("start /w/a")
    await trace.wait_for("start /w/b")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT_S)
    assert sorted(cancelled) == ["/w/a", "/w/b"]
    assert after_barrier == []


async def test_cancellation_of_a_sequential_call_stops_the_batch() -> None:
    trace = Trace()
    ran: list[str] = []

    async def shell(args: dict[str, Any], ctx: ToolContext) -> str:
        await trace.note("start shell")
        await asyncio.Event().wait()
        return "unreachable"

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append("fetch")
        return "ok"

    task = asyncio.create_task(
        dispatch(_calls("shell", "fetch"), _registry(shell=shell, fetch=fetch), CTX)
    )
    await trace.wait_for("start shell")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT_S)
    assert ran == []


async def test_unknown_and_malformed_calls_get_the_registry_errors_without_running() -> None:
    ran: list[str] = []

    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(args.get("path", ""))
        return "ok"

    registry = _registry(read=read)
    calls = _calls("nope", "read {not json", "read /w/a")
    reported: list[int] = []

    async def report(i: int, call: ToolCall, outcome: ToolOutcome) -> None:
        reported.append(i)

    outcomes = await dispatch(calls, registry, CTX, resolve=_identity, on_result=report)
    assert outcomes[0] == await registry.run(calls[0], CTX)
    assert outcomes[1] == await registry.run(calls[1], CTX)
    assert outcomes[0].is_error and "unknown tool 'nope'" in outcomes[0].content
    assert outcomes[1].is_error and "not valid JSON" in outcomes[1].content
    assert outcomes[2] == ToolOutcome("ok")
    assert reported == [0, 1, 2]
    assert ran == ["/w/a"]


async def test_a_failing_tool_is_an_error_result_and_its_siblings_finish() -> None:
    async def read(args: dict[str, Any], ctx: ToolContext) -> str:
        if args["path"] == "/w/bad":
            raise ToolError("no such file: /w/bad")
        return "ok"

    outcomes = await dispatch(
        _calls("read /w/bad", "read /w/good"), _registry(read=read), CTX, resolve=_identity
    )
    assert outcomes == [ToolOutcome("error: no such file: /w/bad", True), ToolOutcome("ok")]


async def test_a_raising_callback_propagates_as_itself() -> None:
    async def explode(index: int, call: ToolCall, outcome: ToolOutcome) -> None:
        raise RuntimeError("store is down")

    with pytest.raises(RuntimeError, match="store is down"):
        await dispatch(
            _calls("read /w/a", "read /w/b"), _registry(), CTX, resolve=_identity, on_result=explode
        )


async def test_max_workers_must_be_positive() -> None:
    with pytest.raises(ValueError):
        await dispatch(_calls("fetch"), _registry(), CTX, max_workers=0)


async def test_empty_batch() -> None:
    assert await dispatch([], _registry(), CTX) == []
