"""Every relative link in README.md and docs/*.md names a file that exists and, where it names
a heading (``page.md#heading``), a heading that page has, by GitHub's anchor rule."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKDOWN = MarkdownIt("commonmark").enable("table")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    tokens = MARKDOWN.parse(page.read_text())
    seen: dict[str, int] = {}
    for opening, inline in zip(tokens, tokens[1:], strict=False):
        if opening.type == "heading_open":
            text = "".join(child.content for child in inline.children or [] if child.type in ("text", "code_inline"))
            slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
    return {slug if n == 0 else f"{slug}-{n}" for slug, count in seen.items() for n in range(count + 1)}


def links(page: Path) -> list[str]:
    return [
        str(child.attrs["href"])
        for token in MARKDOWN.parse(page.read_text())
        if token.type == "inline"
        for child in token.children or []
        if child.type == "link_open"
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for href in links(page):
        parts = urlsplit(href)
        if parts.scheme or parts.netloc:
            continue
        target = (page.parent / parts.path).resolve() if parts.path else page
        if not target.exists():
            broken.append(f"{href}: no such file")
        elif parts.fragment and target.suffix == ".md" and parts.fragment not in anchors(target):
            broken.append(f"{href}: no such heading in {target.relative_to(ROOT)}")
    assert not broken, broken


def test_the_readme_maps_every_docs_page() -> None:
    mapped = {(ROOT / href).resolve() for href in links(ROOT / "README.md")}
    assert set(PAGES[1:]) <= mapped
