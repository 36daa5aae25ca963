"""File tools called directly: happy paths, exact errors, and every way out of the workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.tools import files, safe_open, workspace
from app.tools.builtin import builtin_tools, file_tools
from app.tools.registry import PathClaim, Tool, ToolContext, ToolError, ToolRegistry

SECRET = "SECRET-outside-the-workspace"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SECRET + "\n")
    return out


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(session_id="s", workspace=ws)


TOOLS = {tool.name: tool for tool in file_tools()}


async def call(name: str, args: dict[str, Any], ctx: ToolContext) -> str:
    return await TOOLS[name].handler(args, ctx)


async def refused(name: str, args: dict[str, Any], ctx: ToolContext) -> str:
    with pytest.raises(ToolError) as info:
        await call(name, args, ctx)
    return str(info.value)


# ------------------------------------------------------------------------- the catalog


def test_the_five_file_tools_lead_the_builtin_tools() -> None:
    names = ["list_files", "read_file", "write_file", "patch", "search_files"]
    assert [t.name for t in file_tools()] == names
    assert [t.name for t in builtin_tools()][:5] == names
    ToolRegistry(builtin_tools())  # registers without duplicate names


def test_flags() -> None:
    assert {n for n, t in TOOLS.items() if t.read_only} == {
        "list_files",
        "read_file",
        "search_files",
    }
    assert {n for n, t in TOOLS.items() if t.spill_exempt} == {"read_file"}
    assert all(t.path_scope is not None for t in TOOLS.values())


# ------------------------------------------------------------------------- happy paths


async def test_write_then_read_with_line_numbers_and_paging(ctx: ToolContext, ws: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(1, 11))
    assert await call("write_file", {"path": "deep/er/a.txt", "content": text}, ctx) == (
        f"wrote {len(text)} bytes to deep/er/a.txt"
    )
    assert (ws / "deep/er/a.txt").read_text() == text
    page = await call("read_file", {"path": "deep/er/a.txt", "offset": 3, "limit": 2}, ctx)
    assert page == "     3\tline 3\n     4\tline 4\n... lines 3-4 of 10; continue with offset=5"
    whole = await call("read_file", {"path": "deep/er/a.txt"}, ctx)
    assert whole.splitlines()[-1] == "    10\tline 10"
    assert "continue" not in whole


async def test_write_counts_bytes_and_keeps_mode(ctx: ToolContext, ws: Path) -> None:
    (ws / "run.sh").write_text("old")
    os.chmod(ws / "run.sh", 0o755)
    assert await call("write_file", {"path": "run.sh", "content": "é"}, ctx) == (
        "wrote 2 bytes to run.sh"
    )
    assert (ws / "run.sh").read_text() == "é"
    assert (ws / "run.sh").stat().st_mode & 0o777 == 0o755
    assert [p.name for p in ws.iterdir()] == ["run.sh"]  # no temp file left behind


async def test_write_accepts_an_absolute_path_inside(ctx: ToolContext, ws: Path) -> None:
    await call("write_file", {"path": str(ws / "abs.txt"), "content": "x"}, ctx)
    assert (ws / "abs.txt").read_text() == "x"


async def test_write_refuses_directories(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    assert "is a directory" in await refused("write_file", {"path": "d", "content": "x"}, ctx)
    assert "is a directory" in await refused("write_file", {"path": ".", "content": "x"}, ctx)
    assert "content must be a string" in await refused("write_file", {"path": "f"}, ctx)


async def test_read_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x00\x01\x02")
    (ws / "two").write_text("a\nb\n")
    assert "is a directory" in await refused("read_file", {"path": "d"}, ctx)
    assert "no such file" in await refused("read_file", {"path": "nope"}, ctx)
    assert "needs a path" in await refused("read_file", {}, ctx)
    assert "past the end" in await refused("read_file", {"path": "two", "offset": 9}, ctx)
    assert "binary file" in await call("read_file", {"path": "bin"}, ctx)


async def test_read_counts_lines_like_sed(ctx: ToolContext, ws: Path) -> None:
    # Only \n ends a line (CRLF's \r is dropped); a form feed is text, as in grep and sed.
    (ws / "f").write_bytes(b"one\r\ntwo\x0cstill two\nthree")
    out = await call("read_file", {"path": "f"}, ctx)
    assert out == "     1\tone\n     2\ttwo\x0cstill two\n     3\tthree"


async def test_read_is_bounded_by_chars_and_says_where_to_continue(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace, "MAX_READ_CHARS", 40)
    (ws / "f").write_text("".join(f"row {i}\n" for i in range(1, 21)))
    out = (await call("read_file", {"path": "f"}, ctx)).splitlines()
    assert out[:3] == ["     1\trow 1", "     2\trow 2", "     3\trow 3"]
    assert out[-1] == "... lines 1-3 of 20; continue with offset=4"
    (ws / "long").write_text("y" * 100 + "\nz\n")
    first = (await call("read_file", {"path": "long", "limit": 1}, ctx)).splitlines()
    assert first[0] == "     1\t" + "y" * 33 + " ... (line cut at 40 chars)"
    assert first[-1] == "... lines 1-1 of 2; continue with offset=2"


async def test_patch_replaces_a_unique_string(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    args = {"path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}
    assert await call("patch", args, ctx) == "replaced 1 occurrence in a.py"
    assert (ws / "a.py").read_text() == "x = 1\ny = 3\n"


async def test_patch_absent_and_ambiguous(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.py").write_text("v = 0\nv = 0\n")
    absent = {"path": "a.py", "old_string": "w = 0", "new_string": "w = 1"}
    assert await refused("patch", absent, ctx) == "old_string not found in a.py"
    twice = {"path": "a.py", "old_string": "v = 0", "new_string": "v = 1"}
    assert await refused("patch", twice, ctx) == (
        "old_string occurs 2 times in a.py; add context or set replace_all"
    )
    assert (ws / "a.py").read_text() == "v = 0\nv = 0\n"  # untouched by the refusals
    assert await call("patch", {**twice, "replace_all": True}, ctx) == (
        "replaced 2 occurrences in a.py"
    )
    assert (ws / "a.py").read_text() == "v = 1\nv = 1\n"


async def test_patch_other_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "a").write_text("abc")
    assert "no such file" in await refused(
        "patch", {"path": "b", "old_string": "a", "new_string": "b"}, ctx
    )
    assert "must not be empty" in await refused(
        "patch", {"path": "a", "old_string": "", "new_string": "b"}, ctx
    )
    assert "identical" in await refused(
        "patch", {"path": "a", "old_string": "a", "new_string": "a"}, ctx
    )
    assert "new_string is required" in await refused("patch", {"path": "a", "old_string": "a"}, ctx)


async def test_patch_matches_a_crlf_file_in_its_own_dialect(ctx: ToolContext, ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\n")
    args = {"path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}
    await call("patch", args, ctx)
    assert (ws / "w.txt").read_bytes() == b"1\r\n2\r\n"


async def test_search_contents(ctx: ToolContext, ws: Path) -> None:
    (ws / "b.py").write_text("import os\nx = 1\n")
    (ws / "a").mkdir()
    (ws / "a" / "z.py").write_text("import re\n")
    (ws / "a" / "notes.md").write_text("import nothing\n")
    (ws / "blob.bin").write_bytes(b"import\x00binary")
    (ws / ".git").mkdir()
    (ws / ".git" / "config.py").write_text("import git\n")
    out = await call("search_files", {"pattern": r"^import \w+"}, ctx)
    assert out == "a/notes.md:1: import nothing\na/z.py:1: import re\nb.py:1: import os"
    only_py = await call("search_files", {"pattern": "import", "glob": "*.py"}, ctx)
    assert only_py == "a/z.py:1: import re\nb.py:1: import os"
    under = await call("search_files", {"pattern": "import", "path": "a"}, ctx)
    assert under.splitlines() == ["a/notes.md:1: import nothing", "a/z.py:1: import re"]
    literal = await call("search_files", {"pattern": "x = 1", "regex": False}, ctx)
    assert literal == "b.py:2: x = 1"
    none = await call("search_files", {"pattern": "nowhere"}, ctx)
    assert none.startswith("no matches for 'nowhere'")


async def test_search_glob_only_lists_names(ctx: ToolContext, ws: Path) -> None:
    for name in ["b.py", "a.txt", "sub/c.py", "sub/deeper/d.py"]:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text("")
    assert await call("search_files", {"glob": "*.py"}, ctx) == "b.py\nsub/c.py\nsub/deeper/d.py"
    assert await call("search_files", {"glob": "sub/*.py"}, ctx) == "sub/c.py\nsub/deeper/d.py"
    assert await call("search_files", {"glob": "**/*.py"}, ctx) == "b.py\nsub/c.py\nsub/deeper/d.py"
    assert "no files matching" in await call("search_files", {"glob": "*.rs"}, ctx)


async def test_search_is_bounded_and_says_so(ctx: ToolContext, ws: Path) -> None:
    (ws / "many.txt").write_text("hit\n" * 50)
    out = await call("search_files", {"pattern": "hit", "max_results": 5}, ctx)
    lines = out.splitlines()
    assert lines[:5] == [f"many.txt:{n}: hit" for n in range(1, 6)]
    assert len(lines) == 6 and "truncated" in lines[5] and "first 5 matches" in lines[5]
    exact = await call("search_files", {"pattern": "hit", "max_results": 50}, ctx)
    assert "truncated" not in exact and len(exact.splitlines()) == 50


async def test_search_reads_a_bounded_prefix_of_each_file(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "SEARCH_BYTES_PER_FILE", 100)
    (ws / "big.txt").write_text("early\n" + "x" * 200 + "\nlate\n")
    out = await call("search_files", {"pattern": "early|late"}, ctx)
    assert out.splitlines()[0] == "big.txt:1: early"
    assert "late" not in out.splitlines()[0] and "big.txt:3" not in out
    assert "searched only in their first 100 bytes" in out


async def test_search_errors(ctx: ToolContext) -> None:
    assert "needs a pattern" in await refused("search_files", {}, ctx)
    assert "invalid regex" in await refused("search_files", {"pattern": "("}, ctx)
    assert "no such file" in await refused("search_files", {"pattern": "a", "path": "x"}, ctx)


# ------------------------------------------------------------------- leaving the workspace


@pytest.fixture
def traps(ws: Path, outside: Path) -> None:
    (ws / "dirlink").symlink_to(outside, target_is_directory=True)
    (ws / "filelink").symlink_to(outside / "secret.txt")
    (ws / "newlink").symlink_to(outside / "created-through-link.txt")  # dangling


ESCAPES: list[tuple[str, dict[str, Any]]] = [
    ("read_file", {"path": "../outside/secret.txt"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "filelink"}),
    ("read_file", {"path": "dirlink/secret.txt"}),
    ("read_file", {"path": "sub/../../outside/secret.txt"}),
    ("list_files", {"path": ".."}),
    ("list_files", {"path": "dirlink"}),
    ("search_files", {"pattern": "SECRET", "path": "dirlink"}),
    ("search_files", {"pattern": "SECRET", "path": "/etc"}),
    ("search_files", {"pattern": "SECRET", "path": ".."}),
    ("write_file", {"path": "../escape.txt", "content": "x"}),
    ("write_file", {"path": "/tmp/courier-escape.txt", "content": "x"}),
    ("write_file", {"path": "filelink", "content": "overwritten"}),
    ("write_file", {"path": "newlink", "content": "x"}),
    ("write_file", {"path": "dirlink/new.txt", "content": "x"}),
    ("patch", {"path": "filelink", "old_string": "SECRET", "new_string": "x"}),
    ("patch", {"path": "../outside/secret.txt", "old_string": "SECRET", "new_string": "x"}),
]


@pytest.mark.usefixtures("traps")
@pytest.mark.parametrize(("name", "args"), ESCAPES, ids=[f"{n}:{a['path']}" for n, a in ESCAPES])
async def test_escapes_are_refused(
    name: str, args: dict[str, Any], ctx: ToolContext, outside: Path
) -> None:
    message = await refused(name, args, ctx)
    assert "outside the workspace" in message
    assert SECRET not in message
    # Nothing outside changed: the secret is intact and no file was created beside it.
    assert (outside / "secret.txt").read_text() == SECRET + "\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not Path("/tmp/courier-escape.txt").exists()
    # And the scheduler cannot reserve such a path: the call becomes a barrier.
    scope = TOOLS[name].path_scope
    assert scope is not None and scope(args, ctx) is None


@pytest.mark.usefixtures("traps")
async def test_search_walk_skips_links_that_leave(ctx: ToolContext, ws: Path) -> None:
    (ws / "inside.txt").write_text("SECRET-looking but mine\n")
    (ws / "innerlink").symlink_to(ws / "inside.txt")
    out = await call("search_files", {"pattern": "SECRET"}, ctx)
    assert out == "innerlink:1: SECRET-looking but mine\ninside.txt:1: SECRET-looking but mine"
    names = await call("search_files", {"glob": "*"}, ctx)
    assert "filelink" not in names and "dirlink" not in names


async def test_symlink_inside_is_followed(ctx: ToolContext, ws: Path) -> None:
    (ws / "real.txt").write_text("a")
    (ws / "alias").symlink_to(ws / "real.txt")
    await call("write_file", {"path": "alias", "content": "b"}, ctx)
    assert (ws / "alias").is_symlink() and (ws / "real.txt").read_text() == "b"


async def test_symlink_loop_is_a_clean_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "loop").symlink_to(ws / "loop")
    message = await refused("read_file", {"path": "loop"}, ctx)
    assert message == "cannot resolve path 'loop': symlink loop"  # no host path in it
    assert _scope(TOOLS["write_file"], {"path": "loop", "content": ""}, ctx) is None


# ------------------------------------------------------------------------- path scopes


def _scope(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> list[PathClaim] | None:
    assert tool.path_scope is not None
    return tool.path_scope(args, ctx)


async def test_path_scopes_are_canonical(ctx: ToolContext, ws: Path) -> None:
    (ws / "a").mkdir()
    (ws / "alias.txt").symlink_to(ws / "b.txt")
    real = ws.resolve()
    expected_b = [PathClaim(real / "b.txt", "write")]
    for spelling in ["b.txt", "a/../b.txt", "./b.txt", str(ws / "b.txt"), "alias.txt"]:
        assert _scope(TOOLS["write_file"], {"path": spelling, "content": ""}, ctx) == expected_b
        assert _scope(TOOLS["patch"], {"path": spelling}, ctx) == expected_b
        assert _scope(TOOLS["read_file"], {"path": spelling}, ctx) == [
            PathClaim(real / "b.txt", "read")
        ]
    assert _scope(TOOLS["list_files"], {}, ctx) == [PathClaim(real, "read")]
    assert _scope(TOOLS["search_files"], {"pattern": "x"}, ctx) == [PathClaim(real, "read")]
    assert _scope(TOOLS["search_files"], {"pattern": "x", "path": "a/"}, ctx) == [
        PathClaim(real / "a", "read")
    ]


@pytest.mark.parametrize("name", ["read_file", "write_file", "patch"])
def test_missing_or_invalid_path_is_a_barrier(name: str, ctx: ToolContext) -> None:
    assert _scope(TOOLS[name], {}, ctx) is None
    assert _scope(TOOLS[name], {"path": 7}, ctx) is None
    assert _scope(TOOLS[name], {"path": "a\x00b"}, ctx) is None


async def test_registry_turns_refusals_into_error_results(ctx: ToolContext) -> None:
    registry = ToolRegistry(file_tools())
    tool = registry.get("read_file")
    assert tool is not None
    outcome = await registry.invoke(tool, {"path": "/etc/passwd"}, ctx)
    assert outcome.is_error and "outside the workspace" in outcome.content


async def test_os_errors_reach_the_model(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Simulated rather than chmod-ed: the suite may run as root, which ignores permissions.
    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(ws / "f.txt"))

    monkeypatch.setattr(files, "write_atomic", denied)
    message = await refused("write_file", {"path": "f.txt", "content": "x"}, ctx)
    assert message == "f.txt: Permission denied"
    assert not (ws / "f.txt").exists()


def test_helpers_are_shared() -> None:
    # One containment check for every file tool: both modules open through safe_open.py.
    assert files.open_in_workspace is workspace.open_in_workspace
    assert files.open_beneath is workspace.open_beneath is safe_open.open_beneath


# ------------------------------------------------------------------- bounded search


async def test_catastrophic_pattern_runs_in_linear_time(ctx: ToolContext, ws: Path) -> None:
    # Under Python's re this line takes longer than the universe has left.
    (ws / "evil.txt").write_text("a" * 5000 + "!\n")
    out = await call("search_files", {"pattern": "(a+)+$"}, ctx)
    assert out == "no matches for '(a+)+$' under ."


async def test_backtracking_only_features_are_refused_clearly(ctx: ToolContext, ws: Path) -> None:
    (ws / "f.txt").write_text("abab\n")
    message = await refused("search_files", {"pattern": r"(ab)\1"}, ctx)
    assert "linear time" in message and "backreferences" in message
    assert await call("search_files", {"pattern": r"(ab)\1", "regex": False}, ctx) == (
        "no matches for '(ab)\\\\1' under ."
    )


async def test_search_past_its_deadline_is_a_tool_error(
    ctx: ToolContext, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_text("x\n")
    monkeypatch.setattr(files, "SEARCH_TIMEOUT_S", -1.0)
    message = await refused("search_files", {"pattern": "x"}, ctx)
    assert message.startswith("search_files timed out after -1 s")
