"""The README and docs/ hold together: every relative link reaches a file (and its heading,
when it names one), every page of docs/ is listed on docs/index.md, and every decision is
listed on docs/decisions.md.

The manual moved from the README into docs/ (issue 33); a page renamed or a heading reworded
would otherwise leave links that only a reader finds broken.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).+?\1")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed: a link or heading shown
    as code is an example, not a link."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (backticks and stars
    too, underscores kept), spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give, numbered as GitHub numbers repeated ones."""
    seen: Counter[str] = Counter()
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"^#{1,6} (.+?)#*\s*$", line)
        if match:
            base = _slug(match.group(1))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of a page (web addresses and mail are not checked here)."""
    targets = []
    for line in _prose(page.read_text()):
        for target in LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                targets.append(target)
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


def test_the_index_lists_every_page_of_docs_with_the_architecture_first() -> None:
    index = DOCS / "index.md"
    listed = [
        (index.parent / t.partition("#")[0]).resolve()
        for t in links(index)
        if t.partition("#")[0].endswith(".md")
    ]
    pages = {p.resolve() for p in DOCS.rglob("*.md")} - {index.resolve()}
    assert pages - set(listed) == set()
    assert listed[0] == (DOCS / "architecture.md").resolve()


def test_the_decisions_index_lists_every_entry() -> None:
    """Code cites "docs/decisions.md, *Some title*": the index must name every entry of the
    area pages, so the citation leads to it."""
    index = (DOCS / "decisions.md").read_text()
    for page in sorted((DOCS / "decisions").glob("*.md")):
        for anchor in anchors(page) - {_slug(page.read_text().splitlines()[0].lstrip("# "))}:
            assert f"decisions/{page.name}#{anchor})" in index, f"{page.name}#{anchor}"


def test_the_readme_is_a_front_page() -> None:
    """At most 180 lines, and the two commands CI and newcomers run, exactly as documented."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 180
    assert "\nmake demo   # " in readme
    assert "\nmake test   # " in readme
    assert "](docs/index.md)" in readme
