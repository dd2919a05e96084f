"""README reads in a minute: under 150 lines, its first screen says what the exporter is and
gives the picture, the two commands and the three ways to install. Every Markdown page of the
repository (README, docs/, bench/, deploy/, dashboards/, mixin/, the changelog: everything but
vendored and hidden directories) keeps to what a reference needs: every relative link leads to a
file, and every `#anchor` to a heading, that exists (GitHub's anchor rules), and a page longer
than `LONG_PAGE` lines says why on a `<!-- long: ... -->` line at its top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIRST_SCREEN = 50  # lines
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)", re.M)
LONG_PAGE = 400  # lines; a longer page says why on its first lines
LONG_REASON = re.compile(r"^<!-- long: \S.* -->$")
# Directories whose pages are not this project's own: hidden ones (.venv, .git, caches) and these.
NOT_OURS = ("node_modules", "vendor")


def pages() -> list[str]:
    """Every Markdown page of the repository, relative to its root."""
    out = []
    for path in ROOT.rglob("*.md"):
        rel = path.relative_to(ROOT)
        if any(p.startswith(".") or p in NOT_OURS for p in rel.parts[:-1]) \
                or rel.parts[:2] == ("bench", "out"):
            continue
        out.append(str(rel))
    return sorted(out)


def _prose(path: Path) -> str:
    """The page without its fenced code blocks (a link or heading in code is not one)."""
    return re.sub(r"^ {0,3}(```|~~~).*?^ {0,3}\1", "", path.read_text(), flags=re.S | re.M)


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown file (inline and reference), outside code."""
    text = _prose(path)
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    found = LINK.findall(text) + REFERENCE.findall(text)
    return [t for t in found if not re.match(r"[a-z][a-z+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (links to their text, markup and
    HTML tags gone), lower case, punctuation other than `-` and `_` dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page: each heading's slug, a repeated one with GitHub's `-1`, `-2`...
    suffix, and the ids and names of HTML anchors."""
    text = _prose(path)
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^ {0,3}#{1,6} +(.+?)(?: +#+)? *$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    out.update(re.findall(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", text))
    return out


def too_long(path: Path) -> bool:
    """Longer than a reference needs, with no reason on its first three lines."""
    lines = path.read_text().splitlines()
    return len(lines) > LONG_PAGE and not any(LONG_REASON.match(x) for x in lines[:3])


def broken(path: Path) -> list[str]:
    bad = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def test_readme_is_under_150_lines() -> None:
    assert len(README.read_text().splitlines()) < 150


def test_the_first_screen_has_the_picture_the_two_commands_and_three_installs() -> None:
    first = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert first.startswith("# zaroz units exporter\n")
    assert "![" in first and "(docs/img/overview.png)" in first
    assert ".venv/bin/zaroz-exporter demo" in first
    assert ".venv/bin/python -m pytest" in first
    assert ("helm install zaroz-exporter deploy/helm/zaroz-exporter -n zaroz-exporter "
            "--create-namespace") in first
    assert "kubectl apply -k deploy/overlays/" in first
    assert "(mixin/README.md)" in first


def test_the_pages_are_found() -> None:
    found = pages()
    for page in ("README.md", "deploy/README.md", "docs/scaling.md", "bench/README.md",
                 "mixin/README.md", "dashboards/README.md"):
        assert page in found


@pytest.mark.parametrize("doc", pages())
def test_every_link_leads_to_a_file_and_heading_that_exist(doc: str) -> None:
    assert broken(ROOT / doc) == []


@pytest.mark.parametrize("doc", pages())
def test_a_long_page_says_why_at_its_top(doc: str) -> None:
    assert not too_long(ROOT / doc), (
        f"{doc} is over {LONG_PAGE} lines: split it, or say why on its first line "
        "(<!-- long: generated reference of every metric -->)")


def test_every_doc_is_reachable_from_the_readme_table_of_contents() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README)}
    unlinked = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked)
    assert unlinked == []


def test_the_link_check_catches_a_missing_file_and_heading(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Title\n\n## The `serve` flags\n")
    a = tmp_path / "a.md"
    a.write_text("[ok](b.md#the-serve-flags) [gone](c.md) [nohead](b.md#nope) "
                 "![img](b.md) [web](https://example.org/x) [self](#here)\n\n## Here\n"
                 "```\n[in code](ignored.md)\n```\n")
    assert broken(a) == ["c.md: no such file", "b.md#nope: no heading #nope in b.md"]


def test_the_anchors_follow_githubs_rules(tmp_path: Path) -> None:
    (tmp_path / "x.md").write_text("# X\n")
    page = tmp_path / "p.md"
    page.write_text("# Benchmarks\n\n## sync_revisions\n\n## How to read: noise, ratios\n\n"
                    "### Figures\n\n### Figures\n\n## [cluster](x.md) (`bench/cluster.py`)\n\n"
                    '<a id="kept"></a>\n\n```\n## in code\n```\n'
                    "[ok](#figures-1) [ok2](#sync_revisions) [bad](#figures-2) `[code](#no)`\n"
                    "[ok3](#cluster-benchclusterpy)\n\n[r]: #kept\n[bad-ref]: #nowhere\n")
    assert anchors(page) == {"benchmarks", "sync_revisions", "how-to-read-noise-ratios",
                             "figures", "figures-1", "cluster-benchclusterpy", "kept"}
    assert broken(page) == ["#figures-2: no heading #figures-2 in p.md",
                            "#nowhere: no heading #nowhere in p.md"]


def test_the_length_check_wants_a_reason_at_the_top(tmp_path: Path) -> None:
    page = tmp_path / "long.md"
    body = "".join(f"line {i}\n" for i in range(LONG_PAGE + 1))
    page.write_text("# Long\n" + body)
    assert too_long(page)
    page.write_text("<!-- long: generated reference of every metric -->\n# Long\n" + body)
    assert not too_long(page)
    page.write_text("# Short\n")
    assert not too_long(page)
