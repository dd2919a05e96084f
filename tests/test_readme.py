"""README reads in a minute: under 150 lines, its first screen says what the exporter is and
gives the picture, the two commands and the three ways to install, and every link in it (and in
the docs it points to) leads to a file, and a heading, that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIRST_SCREEN = 50  # lines
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown file, outside code blocks."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


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


@pytest.mark.parametrize("doc", ["README.md", "deploy/README.md",
                                 *sorted(str(p.relative_to(ROOT))
                                         for p in (ROOT / "docs").glob("*.md"))])
def test_every_link_leads_to_a_file_and_heading_that_exist(doc: str) -> None:
    assert broken(ROOT / doc) == []


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
