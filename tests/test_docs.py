"""The user docs hold together: README.md stays a ten-minute read, every internal link and #anchor of README.md
and docs/*.md resolves the way GitHub renders them, every guide is reachable from the README, and the docs state
facts, not the project's issue history (git keeps that)."""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 250

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_ISSUE = re.compile(r"\bissue\s*#?\s*\d+", re.IGNORECASE)


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked (links there are not links)
    unless blank_code is False (a heading's code is part of its anchor)."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line) if blank_code else line))
    return out


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (markup dropped), lower case, every character that is not a letter,
    digit, space, hyphen or underscore removed, spaces made hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text).replace("*", "")
    text = "".join(c for c in text.lower()
                   if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a page, duplicates numbered -1, -2, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(path.read_text(encoding="utf-8"), blank_code=False):
        if m := _HEADING.match(line):
            slug = github_slug(m.group(2))
            count = seen.get(slug, 0)
            found.add(slug if count == 0 else f"{slug}-{count}")
            seen[slug] = count + 1
    return found


def internal_links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link that is not to another site."""
    text = path.read_text(encoding="utf-8")
    return [(number, target) for number, line in prose_lines(text) for target in _LINK.findall(line)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)]


def broken(path: Path) -> list[str]:
    problems = []
    for number, target in internal_links(path):
        where = f"{path.relative_to(REPO)}:{number}: {target}"
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.is_relative_to(REPO):
            problems.append(f"{where}: leads outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(REPO)}")
    return problems


def test_the_readme_is_a_ten_minute_read():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the rest belongs in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_internal_link_and_anchor_resolves(page: Path):
    assert not broken(page), "\n".join(broken(page))


def test_every_guide_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in internal_links(README)}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert len(PAGES) > 5 and not orphans, f"guides the README does not link: {orphans}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_docs_carry_no_issue_numbers(page: Path):
    hits = [f"{page.relative_to(REPO)}:{n}: {m.group(0)}" for n, line in
            enumerate(page.read_text(encoding="utf-8").splitlines(), 1) for m in _ISSUE.finditer(line)]
    assert not hits, "state the facts, not the issue that brought them (git keeps the history):\n" + "\n".join(hits)


def test_the_link_checker_finds_a_broken_link_a_missing_anchor_and_an_issue_number(tmp_path, monkeypatch):
    """The checks above can fail: a page with a missing file, a wrong anchor and an issue number is caught."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    heading = "# The `local` backbone: what it is, and how right it is\n## Twice\n## Twice\n"
    (tmp_path / "docs" / "a.md").write_text(heading)
    page = tmp_path / "README.md"
    page.write_text("[ok](docs/a.md#the-local-backbone-what-it-is-and-how-right-it-is) [ok](docs/a.md#twice-1)\n"
                    "[gone](docs/b.md) [bad anchor](docs/a.md#twice-2) [out](../x.md) `[code](nope.md)`\n"
                    "[self](#nothing)\n```\n[fenced](nope.md)\n```\nSee Issue 32 and issue #7.\n")
    assert [p.split(": ", 1)[1] for p in broken(page)] == [
        "docs/b.md: no such file", "docs/a.md#twice-2: no heading with anchor #twice-2 in docs/a.md",
        "../x.md: leads outside the repository", "#nothing: no heading with anchor #nothing in README.md"]
    assert len(_ISSUE.findall(page.read_text())) == 2
