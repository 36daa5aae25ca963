"""Every link between the README and docs/ leads somewhere: the file exists, and so does the
heading an `#anchor` names; every file of the repository the pages name (`app/...`,
`tests/...`) exists too.

The README is short because it points into docs/; a page renamed or a heading reworded
would leave a newcomer at a dead link, and nothing else would notice. Anchors follow
GitHub's rule (lower case, punctuation dropped, spaces to hyphens). No server: this reads
files.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

ROOT = REPO
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
# A path in the repository, as prose names one; `tests/test_<area>.py` is a pattern, not a path.
_REPO_PATH = re.compile(r"\b(?:app|tests|benchmarks|deploy)/[\w./-]+(?![\w<])")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {anchor(h) for h in _HEADING.findall(_FENCE.sub("", page.read_text()))}


def broken_links(page: Path) -> list[str]:
    out = []
    for target in _LINK.findall(_FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:, file: are not ours to check
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            out.append(f"{target}: no heading #{fragment} in {dest.name}")
    return out


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    named = {m.rstrip(".") for m in _REPO_PATH.findall(page.read_text())}
    # What a make target builds (tests/node/node_modules/) is named but not committed: a fresh
    # clone has none of it, so only paths git would track are required to exist.
    return sorted(p for p in named if not (root / p).exists() and not _ignored(root, p))


def _ignored(root: Path, path: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", path], capture_output=True, check=False
    )
    return done.returncode == 0


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_lead_somewhere(page: Path) -> None:
    assert broken_links(page) == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## Keys, tokens and access\n")
    page.write_text(
        "# Here\n\n[ok](other.md#keys-tokens-and-access) [self](#here) "
        "[gone](missing.md) [bad anchor](other.md#keys) [web](https://example.com)\n"
        "```\n[inside a fence](missing-too.md)\n```\n"
    )
    assert [line.split(":")[0] for line in broken_links(page)] == ["missing.md", "other.md#keys"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(page: Path) -> None:
    # architecture.md walks requests file by file: a module moved or split would leave the
    # walk pointing at nothing, and only a reader would find out.
    assert missing_paths(page) == []


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "app" / "agent").mkdir(parents=True)
    (tmp_path / "app" / "agent" / "loop.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text(
        "`app/agent/loop.py` runs, then app/agent/gone.py. See `app/agent/` and "
        "`tests/test_<area>.py`.\n"
    )
    assert missing_paths(page, tmp_path) == ["app/agent/gone.py"]
