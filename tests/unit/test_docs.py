"""The documentation's links and the code paths docs/architecture.md names point at what exists.

Links: every relative link in README.md, BENCHMARKS.md, rules/README.md and docs/*.md leads to a
file of the repository and, with an ``#anchor``, to a heading of that page (GitHub's anchors).
Paths: every ``aot_build/...`` file or folder that docs/architecture.md names exists, so its
"where things live" stays true when modules move.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PAGES = sorted(
    [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "rules" / "README.md", *(ROOT / "docs").glob("*.md")]
)

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def _code_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
        elif fenced:
            out.append(line)
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped
    (letters, digits, ``-`` and ``_`` stay), spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, numbered as GitHub numbers repeated headings."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if not m:
            continue
        slug = _slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link in ``page``'s prose, code left out."""
    out: list[tuple[int, str]] = []
    for n, line in _prose_lines(page.read_text(encoding="utf-8")):
        for m in _LINK.finditer(_INLINE_CODE.sub("", line)):
            out.append((n, m.group(1)))
    return out


def broken_links(page: Path) -> list[str]:
    problems: list[str] = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{n}: link ({target})"
        if not dest.exists():
            problems.append(f"{where}: {path} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: {dest.relative_to(ROOT)} has no heading with the anchor #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_existing_files_and_headings(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "broken links (fix the link or the page it names):\n  " + "\n  ".join(problems)


def architecture_paths() -> list[str]:
    """The ``aot_build/`` files and folders docs/architecture.md names: in backticks in its
    prose, and the module names of its diagrams (relative to ``aot_build/``)."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named: list[str] = []
    for _, line in _prose_lines(text):
        for code in _INLINE_CODE.findall(line):
            named += re.findall(r"aot_build/[\w./-]*", code)
    for line in _code_lines(text):
        for word in re.findall(r"[\w/]+\.(?:py|c)\b", line):
            named.append(word if word.startswith("aot_build/") else f"aot_build/{word}")
    return sorted({p.rstrip("/.") for p in named})


def test_architecture_names_only_existing_modules() -> None:
    paths = architecture_paths()
    assert "aot_build/load/shim.py" in paths and "aot_build/guards/checks.py" in paths, paths
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, (
        "docs/architecture.md names modules that do not exist (a module moved or was renamed: "
        "update the page):\n  " + "\n  ".join(missing)
    )


def test_anchor_slugs_follow_github() -> None:
    assert _slug("Guards: what is checked on every call") == "guards-what-is-checked-on-every-call"
    assert _slug("Compile backends: `backend=` and the `Backend` protocol") == (
        "compile-backends-backend-and-the-backend-protocol"
    )
    assert _slug("manylinux_2_28 artifacts (`benchmarks/x.py`)") == "manylinux_2_28-artifacts-benchmarksxpy"
