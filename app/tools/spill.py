"""Large output is relocated, not truncated.

A tool result too large for the conversation is written to a file in the workspace and the
model sees a preview, the size, the path and a `read_file` call to page the rest back in.
Nothing is lost and no model call is spent condensing it. Two layers:

1. **Per result.** Anything over `per_result` chars is spilled, unless its tool is
   `spill_exempt`. The file reader is exempt because the recovery instruction names it: a
   capped reader would spill the recovery read and send the model to read that, forever.
2. **Per turn.** If the turn's total (`already_used` plus what the model will see from this
   batch) still exceeds `per_turn`, the largest remaining results are spilled first until
   it fits. Exempt results are included here: the exemption is from the per-result cap
   only, otherwise a batch of large reads could fill the window unchecked. The recursion
   hazard does not return, because the hint asks for a page small enough to fit.

The caller keeps the full text for display; only the model sees the preview.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 100_000
TURN_BUDGET_CHARS = 200_000
PREVIEW_CHARS = 1_500
CHARS_PER_TOKEN = 4
RESULT_WINDOW_SHARE = 0.25
"""One result may take at most this share of the window (in chars at 4 chars/token)."""
TURN_WINDOW_SHARE = 0.5
"""One turn's tool results may take at most this share of the window."""
MIN_RESULT_CHARS = 2 * PREVIEW_CHARS
"""Below this a spill would barely shrink anything, so the cap stops scaling down here."""
SPILL_DIR = Path(".courier") / "spill"
READ_LINE_OVERHEAD = 8
"""Chars `read_file` adds per line (right-aligned number, tab, newline)."""
READ_MAX_LINES = 2_000
"""`read_file`'s default page; a suggested page never asks for more."""


@dataclass(frozen=True, slots=True)
class SpillInput:
    call_id: str
    tool_name: str
    content: str
    exempt: bool = False
    """The tool's `spill_exempt`: never spilled, by the per-result cap or the turn sweep."""


@dataclass(frozen=True, slots=True)
class SpillOutput:
    model_content: str
    """What goes into the model's transcript: the original text, or a preview and hint."""
    spilled_path: Path | None = None
    """Absolute path of the file holding the full text, when it was spilled."""


def budgets(context_window: int) -> tuple[int, int]:
    """(per_result, per_turn) char budgets for a model with `context_window` tokens.

    The defaults hold for large windows and only ever scale down: one result may take at
    most 25% of the window and one turn's results 50%, counting 4 chars per token. With a
    128K window that is 128,000 and 256,000 chars, so the defaults (100,000 and 200,000)
    apply; with a 32K window it is 32,000 and 64,000. The per-result cap stops at 3,000
    chars (twice the preview) because below that a spill no longer saves anything, and the
    turn budget is never smaller than one result's cap.
    """
    if context_window <= 0:
        raise ValueError("context_window must be positive")
    window_chars = context_window * CHARS_PER_TOKEN
    per_result = min(MAX_RESULT_CHARS, int(window_chars * RESULT_WINDOW_SHARE))
    per_result = max(per_result, MIN_RESULT_CHARS)
    per_turn = min(TURN_BUDGET_CHARS, int(window_chars * TURN_WINDOW_SHARE))
    return per_result, max(per_turn, per_result)


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    """The head of `content`, cut at the last newline in the second half of `limit`.

    Cutting at a line keeps the preview readable and makes "continue at line N" exact; a
    newline in the first half would waste most of the preview, so a hard cut wins then.
    """
    if len(content) <= limit:
        return content
    head = content[:limit]
    cut = head.rfind("\n")
    return head[:cut] if cut >= limit // 2 else head


def _safe(name: str) -> str:
    # Ids come from the model or the provider: keep file names to a boring alphabet, and
    # add a digest whenever that changed anything so distinct ids stay distinct files.
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
    if cleaned != name or not cleaned:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = f"{cleaned}-{digest}" if cleaned else digest
    return cleaned


def _file_name(turn_id: str, call_id: str, index: int, taken: set[str]) -> str:
    stem = f"{_safe(turn_id)}-{_safe(call_id)}"
    name, suffix = f"{stem}.txt", index
    while name in taken:
        # A model can repeat a call id within one batch; a suffix keeps both files, and the
        # loop keeps it off another id that happens to look like `<id>-<n>`.
        name, suffix = f"{stem}-{suffix}.txt", suffix + 1
    taken.add(name)
    return name


def _inside(root: Path, path: Path) -> bool:
    return path == root or root in path.parents


def _write(workspace: Path, relative: Path, content: str) -> Path:
    """Write `content` at `workspace/relative` without following links out of the workspace.

    The model controls the workspace (a sandboxed command can plant `.courier -> /etc`), so
    the directory is checked after resolution, before and after creating it, and the file
    is written beside its final name and renamed over it: a rename replaces a planted
    symlink instead of writing through it.
    """
    root = workspace.resolve()
    directory = root / relative.parent
    if not _inside(root, directory.resolve()):
        raise OSError(f"{relative.parent} resolves outside the workspace")
    directory.mkdir(parents=True, exist_ok=True)
    if not _inside(root, directory.resolve()):
        raise OSError(f"{relative.parent} resolves outside the workspace")
    target = directory / relative.name
    temporary = directory / f".{relative.name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
            f.write(content)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return target


def _line_count(text: str) -> int:
    # Newlines only, as read_file numbers lines: splitlines() would also break on \r, \f
    # and U+2028, and a progress bar full of \r would point the model at the wrong line.
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def _page_hint(content: str, shown: str, relative: Path, per_result: int) -> str:
    lines = _line_count(content)
    # Lines the preview shows whole; one it stops inside is paged again from its start.
    complete = shown.count("\n") + (1 if content[len(shown) : len(shown) + 1] == "\n" else 0)
    average = len(content) // max(lines, 1)
    # Half the cap per page, so a page plus the rest of the turn stays well under budget.
    limit = max(1, min(READ_MAX_LINES, (per_result // 2) // (average + READ_LINE_OVERHEAD)))
    path = relative.as_posix()
    return (
        f"[output too large: {len(content):,} chars, {lines:,} lines; the full text is in "
        f"{path} and the start is shown above. Page through the rest with "
        f'read_file(path="{path}", offset={complete + 1}, limit={limit}), raising offset '
        f"by {limit} each time.]"
    )


def _relocate(
    item: SpillInput, *, workspace: Path, relative: Path, per_result: int, current: int
) -> SpillOutput | None:
    """The spilled form of `item`, or None when it would not be shorter than `current`."""
    shown = preview(item.content)
    model_content = f"{shown}\n\n{_page_hint(item.content, shown, relative, per_result)}"
    if len(model_content) >= current:
        return None
    try:
        written = _write(workspace, relative, item.content)
    except OSError as exc:
        # Keep the turn alive: a full disk must not put a megabyte into the window.
        log.warning("could not spill %s output to %s: %s", item.tool_name, relative, exc)
        note = (
            f"[output too large: {len(item.content):,} chars; only the start is shown and "
            "the rest could not be saved. Narrow the request to see more.]"
        )
        return SpillOutput(f"{shown}\n\n{note}")
    return SpillOutput(model_content, written)


def spill(
    results: Sequence[SpillInput],
    *,
    workspace: Path,
    turn_id: str,
    per_result: int,
    per_turn: int,
    already_used: int = 0,
) -> list[SpillOutput]:
    """One output per input, in order; deterministic for the same inputs.

    Files go to `<workspace>/.courier/spill/<turn_id>-<call_id>.txt` (names sanitised) and
    are overwritten if they exist, so replaying a turn gives the same result. A result is
    only spilled when that makes it shorter. `already_used` is what earlier batches of the
    same turn already put in front of the model.
    """
    if per_result < 1 or per_turn < 1:
        raise ValueError("budgets must be positive")
    taken: set[str] = set()
    names = [
        SPILL_DIR / _file_name(turn_id, item.call_id, index, taken)
        for index, item in enumerate(results)
    ]
    outputs = [SpillOutput(item.content) for item in results]
    relocated: set[int] = set()

    def relocate(index: int) -> int:
        """Spill result `index` if that shrinks it; returns the chars saved."""
        before = len(outputs[index].model_content)
        replaced = _relocate(
            results[index],
            workspace=workspace,
            relative=names[index],
            per_result=per_result,
            current=before,
        )
        relocated.add(index)
        if replaced is None:
            return 0
        outputs[index] = replaced
        return before - len(replaced.model_content)

    for index, item in enumerate(results):
        if not item.exempt and len(item.content) > per_result:
            relocate(index)

    total = already_used + sum(len(out.model_content) for out in outputs)
    # Largest first, ties by emission order, so the sweep is deterministic.
    # Exempt results stay out of the sweep too: spilling the file reader's output would
    # send the model back to the file reader, a recovery path that never ends.
    remaining = sorted(
        (i for i in range(len(results)) if i not in relocated and not results[i].exempt),
        key=lambda i: (-len(results[i].content), i),
    )
    for index in remaining:
        if total <= per_turn:
            break
        total -= relocate(index)
    return outputs
