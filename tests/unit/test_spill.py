"""Large output relocation: what the model sees, what lands on disk, and the budgets."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from app.tools.registry import ToolContext
from app.tools.spill import (
    MAX_RESULT_CHARS,
    PREVIEW_CHARS,
    TURN_BUDGET_CHARS,
    SpillInput,
    SpillOutput,
    budgets,
    preview,
    spill,
)


def _lines(total_chars: int, width: int = 79) -> str:
    """Numbered lines of `width` chars plus newline, about `total_chars` in all."""
    count = total_chars // (width + 1)
    return "".join(f"{i:08d} " + "x" * (width - 9) + "\n" for i in range(count))


def _spill(
    workspace: Path,
    *items: SpillInput,
    turn: str = "turn1",
    per_result: int = MAX_RESULT_CHARS,
    per_turn: int = TURN_BUDGET_CHARS,
    already_used: int = 0,
) -> list[SpillOutput]:
    return spill(
        items,
        workspace=workspace,
        turn_id=turn,
        per_result=per_result,
        per_turn=per_turn,
        already_used=already_used,
    )


def test_a_300kb_result_is_spilled_with_preview_path_and_paging_hint(tmp_path: Path) -> None:
    content = _lines(300_000)
    [out] = _spill(tmp_path, SpillInput("call_1", "terminal", content))

    assert out.spilled_path == tmp_path / ".courier" / "spill" / "turn1-call_1.txt"
    assert out.spilled_path.read_text() == content
    assert out.model_content.startswith(content[:700])
    assert len(out.model_content) < PREVIEW_CHARS + 400
    lines = content.count("\n")
    assert f"{len(content):,} chars, {lines:,} lines" in out.model_content
    assert ".courier/spill/turn1-call_1.txt" in out.model_content
    hint = re.search(r'read_file\(path="([^"]+)", offset=(\d+), limit=(\d+)\)', out.model_content)
    assert hint is not None
    assert hint.group(1) == ".courier/spill/turn1-call_1.txt"
    # The preview holds whole 80-char lines, so paging resumes right after the last one.
    shown = out.model_content.split("\n\n[output too large")[0]
    assert shown.endswith("x") and len(shown.splitlines()) == int(hint.group(2)) - 1


def test_the_paging_hint_pages_the_file_back_with_read_file(tmp_path: Path) -> None:
    content = _lines(300_000)
    [out] = _spill(tmp_path, SpillInput("call_1", "terminal", content))
    hint = re.search(r'read_file\(path="([^"]+)", offset=(\d+), limit=(\d+)\)', out.model_content)
    assert hint is not None
    path, offset, limit = hint.group(1), int(hint.group(2)), int(hint.group(3))
    # Imported here so a change in the file tools fails this test, not the whole module.
    from app.tools.workspace import read_file

    ctx = ToolContext(session_id="s", workspace=tmp_path)
    page = asyncio.run(read_file({"path": path, "offset": offset, "limit": limit}, ctx))
    first = page.splitlines()[0].split("\t", 1)
    assert int(first[0]) == offset
    assert first[1] == content.splitlines()[offset - 1]
    # A suggested page fits well inside the per-result cap.
    assert len(page) <= MAX_RESULT_CHARS // 2 + 200


def test_small_results_pass_through_untouched(tmp_path: Path) -> None:
    outs = _spill(tmp_path, SpillInput("a", "t", "hello"), SpillInput("b", "t", ""))
    assert outs == [SpillOutput("hello"), SpillOutput("")]
    assert not (tmp_path / ".courier").exists()


def test_a_result_exactly_at_the_cap_stays(tmp_path: Path) -> None:
    content = "y" * MAX_RESULT_CHARS
    assert _spill(tmp_path, SpillInput("a", "t", content)) == [SpillOutput(content)]


def test_an_exempt_result_is_not_spilled_by_the_per_result_cap(tmp_path: Path) -> None:
    content = _lines(150_000)
    [out] = _spill(tmp_path, SpillInput("a", "read_file", content, exempt=True))
    assert out == SpillOutput(content)


def test_the_per_turn_sweep_skips_exempt_results(tmp_path: Path) -> None:
    # Spilling the file reader's output would send the model back to the file reader.
    reads = [SpillInput(f"r{i}", "read_file", _lines(90_000), exempt=True) for i in range(3)]
    other = SpillInput("t", "terminal", _lines(50_000))
    outs = _spill(tmp_path, *reads, other)
    assert [o.spilled_path is not None for o in outs] == [False, False, False, True]


def test_per_turn_budget_spills_the_largest_first(tmp_path: Path) -> None:
    sizes = [40_000, 90_000, 60_000, 80_000]
    items = [SpillInput(f"c{i}", "t", _lines(n)) for i, n in enumerate(sizes)]
    outs = _spill(tmp_path, *items, per_turn=150_000)
    # 270K in all: spilling 90K leaves ~180K, spilling 80K leaves ~100K, which fits.
    assert [o.spilled_path is not None for o in outs] == [False, True, False, True]
    assert sum(len(o.model_content) for o in outs) <= 150_000
    for item, out in zip(items, outs, strict=True):
        if out.spilled_path is not None:
            assert out.spilled_path.read_text() == item.content


def test_per_turn_budget_counts_what_the_turn_already_used(tmp_path: Path) -> None:
    items = [SpillInput("a", "t", _lines(50_000)), SpillInput("b", "t", _lines(30_000))]
    assert all(o.spilled_path is None for o in _spill(tmp_path, *items, per_turn=100_000))
    outs = _spill(tmp_path, *items, per_turn=100_000, already_used=40_000)
    assert [o.spilled_path is not None for o in outs] == [True, False]


def test_per_turn_ties_break_by_emission_order(tmp_path: Path) -> None:
    items = [SpillInput(f"c{i}", "t", _lines(60_000)) for i in range(3)]
    outs = _spill(tmp_path, *items, per_turn=130_000)
    assert [o.spilled_path is not None for o in outs] == [True, False, False]


def test_per_turn_never_spills_what_would_not_shrink(tmp_path: Path) -> None:
    items = [SpillInput(f"c{i}", "t", "z" * 500) for i in range(4)]
    outs = _spill(tmp_path, *items, per_turn=100)
    assert outs == [SpillOutput("z" * 500)] * 4
    assert not (tmp_path / ".courier").exists()


def test_spill_is_deterministic(tmp_path: Path) -> None:
    items = [SpillInput("a", "t", _lines(120_000)), SpillInput("b", "t", _lines(90_000))]
    first = _spill(tmp_path, *items, per_turn=150_000)
    again = _spill(tmp_path, *items, per_turn=150_000)
    assert first == again


def test_file_names_are_sanitised_and_distinct(tmp_path: Path) -> None:
    content = _lines(120_000)
    outs = _spill(
        tmp_path,
        SpillInput("../../etc/passwd", "t", content),
        SpillInput("a/b", "t", content),
        SpillInput("a_b", "t", content),
        SpillInput("dup-5", "t", content),
        SpillInput("dup", "t", content),
        SpillInput("dup", "t", content),
        SpillInput("", "t", content),
        turn="t/../1",
    )
    spill_dir = (tmp_path / ".courier" / "spill").resolve()
    paths = [o.spilled_path for o in outs]
    assert all(p is not None and p.parent.resolve() == spill_dir for p in paths)
    assert len(set(paths)) == len(paths)
    for p in paths:
        assert p is not None and re.fullmatch(r"[A-Za-z0-9_-]+\.txt", p.name)


def test_a_planted_symlink_cannot_redirect_the_spill(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / ".courier").symlink_to(outside)
    content = _lines(120_000)
    [out] = _spill(workspace, SpillInput("a", "t", content))
    assert out.spilled_path is None
    assert list(outside.iterdir()) == []
    # The model still gets a bounded preview, and is told the rest was not saved.
    assert len(out.model_content) < PREVIEW_CHARS + 300
    assert "could not be saved" in out.model_content


def test_a_planted_file_symlink_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    workspace = tmp_path / "ws"
    spill_dir = workspace / ".courier" / "spill"
    spill_dir.mkdir(parents=True)
    (spill_dir / "turn1-a.txt").symlink_to(victim)
    content = _lines(120_000)
    [out] = _spill(workspace, SpillInput("a", "t", content))
    assert victim.read_text() == "keep me"
    assert out.spilled_path is not None and out.spilled_path.read_text() == content
    assert not out.spilled_path.is_symlink()


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (1_000_000, (100_000, 200_000)),
        (128_000, (100_000, 200_000)),
        (100_000, (100_000, 200_000)),
        (32_000, (32_000, 64_000)),
        (8_000, (8_000, 16_000)),
        (2_000, (3_000, 4_000)),
        (500, (3_000, 3_000)),
    ],
)
def test_budgets_scale_down_for_small_windows(window: int, expected: tuple[int, int]) -> None:
    assert budgets(window) == expected


def test_budgets_never_exceed_the_defaults_and_shrink_with_the_window() -> None:
    previous = (0, 0)
    for window in (1_000, 4_000, 16_000, 64_000, 256_000, 2_000_000):
        per_result, per_turn = budgets(window)
        assert per_result <= MAX_RESULT_CHARS and per_turn <= TURN_BUDGET_CHARS
        assert per_result <= per_turn
        assert (per_result, per_turn) >= previous
        previous = (per_result, per_turn)
        if window >= 16_000:
            assert per_result <= window  # 25% of the window at 4 chars/token


def test_budgets_reject_a_nonsense_window() -> None:
    with pytest.raises(ValueError):
        budgets(0)


def test_a_small_window_spills_what_a_large_one_keeps(tmp_path: Path) -> None:
    content = _lines(40_000)
    per_result, per_turn = budgets(16_000)
    [out] = spill(
        [SpillInput("a", "t", content)],
        workspace=tmp_path,
        turn_id="t",
        per_result=per_result,
        per_turn=per_turn,
    )
    assert out.spilled_path is not None
    per_result, per_turn = budgets(128_000)
    [kept] = spill(
        [SpillInput("a", "t", content)],
        workspace=tmp_path,
        turn_id="t",
        per_result=per_result,
        per_turn=per_turn,
    )
    assert kept == SpillOutput(content)


def test_preview_cuts_at_the_last_newline_past_halfway() -> None:
    content = "a" * 1_000 + "\n" + "b" * 300 + "\n" + "c" * 5_000
    assert preview(content) == "a" * 1_000 + "\n" + "b" * 300


def test_preview_cuts_hard_when_the_only_newline_is_early() -> None:
    content = "a" * 100 + "\n" + "b" * 5_000
    assert preview(content) == content[:PREVIEW_CHARS]


def test_preview_of_a_short_text_is_the_text() -> None:
    assert preview("short\ntext") == "short\ntext"


def test_paging_resumes_after_the_last_whole_line_shown(tmp_path: Path) -> None:
    content = "".join(f"{i:04d}" + "q" * 995 + "\n" for i in range(150))  # 1,000-char lines
    [out] = _spill(tmp_path, SpillInput("a", "t", content), per_result=10_000)
    shown = out.model_content.split("\n\n[output too large")[0]
    assert shown == content[:999]  # the newline at 999 is past halfway of the window
    assert "offset=2," in out.model_content


def test_a_hard_cut_preview_pages_from_the_partial_line(tmp_path: Path) -> None:
    content = "a" * 400 + "\n" + "b" * 5_000 + "\n" + "c" * 200_000
    [out] = _spill(tmp_path, SpillInput("a", "t", content))
    shown = out.model_content.split("\n\n[output too large")[0]
    assert shown == content[:PREVIEW_CHARS]
    assert "3 lines" in out.model_content
    assert "offset=2," in out.model_content  # line 2 was shown only in part
    [out] = _spill(tmp_path, SpillInput("b", "t", "w" * 200_000))
    assert "offset=1," in out.model_content


def test_line_counts_follow_read_file_newlines_only(tmp_path: Path) -> None:
    content = ("progress 10%\rprogress 100%\u2028\f\n" * 4_000).removesuffix("\n")
    [out] = _spill(tmp_path, SpillInput("a", "t", content))
    assert f"{len(content):,} chars, 4,000 lines" in out.model_content
