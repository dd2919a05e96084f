"""Runbook links that work: every runbook_url resolves to a section of docs/runbooks.md that
names a real dashboard panel and the query to start from, under a base that is not the old
placeholder repository."""

from __future__ import annotations

import re
import tomllib
import unicodedata
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

import dashboards
from alerts import alerting, render
from alerts.__main__ import main as alerts_main
from alerts.config import DEFAULT_CONFIG, DEFAULT_RUNBOOK_BASE, PROJECT_DOCS_URL, Config

ROOT = Path(__file__).resolve().parent.parent
RUNBOOKS = ROOT / "docs" / "runbooks.md"
# Where runbook_url pointed before it was a setting: a repository path nobody publishes.
PLACEHOLDER = "github.com/zaroz/zaroz-exporter/blob/main"
GENERATED_RULES = [
    render.RULES_DIR / "alerts.yaml",
    ROOT / "deploy" / "base" / "generated" / "prometheusrules.yaml",
]
_PANEL = re.compile(
    r"^Dashboard \*\*(?P<dash>[^*]+)\*\*, panel \*\*(?P<panel>[^*]+)\*\*\. "
    r"Start with this query:\n```promql\n(?P<query>.+?)\n```",
    re.MULTILINE | re.DOTALL,
)


def github_anchor(heading: str, seen: dict[str, int]) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens, `-1`, `-2`... for repeats (github-slugger's rules)."""
    text = unicodedata.normalize("NFC", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    slug = text.replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    return slug if n == 0 else f"{slug}-{n}"


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)):
            out.add(github_anchor(m.group(1), seen))
    return out


def _sections(markdown: str) -> dict[str, str]:
    return {
        part.splitlines()[0].strip(): part
        for part in re.split(r"^## ", markdown, flags=re.MULTILINE)[1:]
    }


def _runbook_urls(path: Path) -> list[str]:
    return re.findall(r"runbook_url: (\S+)", path.read_text())


def test_github_anchor_rules() -> None:
    seen: dict[str, int] = {}
    assert github_anchor("ZarozGenerationStuck", seen) == "zarozgenerationstuck"
    assert github_anchor("What to do (first)?", seen) == "what-to-do-first"
    assert github_anchor("What to do (first)?", seen) == "what-to-do-first-1"
    assert anchors("# A\n```\n# not a heading\n```\n## B c\n") == {"a", "b-c"}


def test_every_runbook_url_anchor_resolves() -> None:
    """The URLs as generated, in the rule files and the PrometheusRules deploy/ installs."""
    known = anchors(RUNBOOKS.read_text())
    for path in GENERATED_RULES:
        urls = _runbook_urls(path)
        assert urls, path
        for url in urls:
            base, _, anchor = url.partition("#")
            assert base == DEFAULT_RUNBOOK_BASE, (path, url)
            assert anchor in known, f"{path.name}: {url}: no such heading in docs/runbooks.md"


def test_every_alert_has_its_runbook_url() -> None:
    rules = yaml.safe_load((render.RULES_DIR / "alerts.yaml").read_text())
    got = {
        r["alert"]: r["annotations"]["runbook_url"]
        for g in rules["groups"] for r in g["rules"]
    }
    want = {a.name: f"{DEFAULT_RUNBOOK_BASE}#{a.anchor}" for a in alerting.alerts(DEFAULT_CONFIG)}
    assert got == want


def test_no_generated_rule_uses_the_placeholder() -> None:
    for path in [*GENERATED_RULES, *render.TESTS_DIR.glob("*.yaml")]:
        assert PLACEHOLDER not in path.read_text(), path
    assert PLACEHOLDER not in DEFAULT_RUNBOOK_BASE


def test_default_base_is_the_published_docs() -> None:
    """The default is the runbooks page under the Documentation URL the package declares."""
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    assert urls["Documentation"] == PROJECT_DOCS_URL
    assert urls["Documentation"] + "runbooks/" == DEFAULT_RUNBOOK_BASE
    assert urlsplit(DEFAULT_RUNBOOK_BASE).scheme == "https"
    assert DEFAULT_RUNBOOK_BASE in RUNBOOKS.read_text()


def test_runbook_base_is_a_setting() -> None:
    base = "https://wiki.example.internal/sre/zaroz-runbooks"
    text = render.rule_files(Config(runbook_base=base))["alerts.yaml"]
    urls = re.findall(r"runbook_url: (\S+)", text)
    assert urls and all(u.startswith(base + "#") for u in urls)
    assert DEFAULT_RUNBOOK_BASE not in text


@pytest.mark.parametrize(
    "bad", ["docs/runbooks.md", "https://x.example/runbooks#top", "ftp://x.example/r", ""]
)
def test_runbook_base_must_be_an_absolute_url_without_fragment(bad: str) -> None:
    with pytest.raises(ValueError, match="runbook base"):
        Config(runbook_base=bad)


def test_cli_writes_rules_with_another_base(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = "https://runbooks.example.internal/zaroz"
    assert alerts_main(["--runbook-base", base, "--output", str(tmp_path)]) == 0
    urls = _runbook_urls(tmp_path / "alerts.yaml")
    assert len(urls) == len(alerting.alerts(DEFAULT_CONFIG))
    assert all(u.startswith(base + "#") for u in urls)
    # The checked-in rules are untouched, and a base without --output is refused.
    assert all(u.startswith(DEFAULT_RUNBOOK_BASE) for u in _runbook_urls(GENERATED_RULES[0]))
    assert alerts_main(["--runbook-base", base]) == 2
    assert alerts_main(["--runbook-base", "not a url", "--output", str(tmp_path)]) == 2
    assert "--runbook-base" in capsys.readouterr().err


def _panels() -> dict[str, set[str]]:
    """Dashboard title -> panel titles, from the dashboards' code (not the JSON files)."""
    out: dict[str, set[str]] = {}
    for dash in dashboards.generate().values():
        titles = out.setdefault(dash["title"], set())
        stack = list(dash["panels"])
        while stack:
            p = stack.pop()
            titles.add(p["title"])
            stack.extend(p.get("panels", []))
    return out


def test_every_runbook_names_a_real_panel_and_a_first_query() -> None:
    panels = _panels()
    sections = _sections(RUNBOOKS.read_text())
    assert set(sections) == {a.name for a in alerting.alerts(DEFAULT_CONFIG)}
    for name, text in sections.items():
        diagnosis = text.split("### Diagnosis\n", 1)[1]
        m = _PANEL.match(diagnosis)
        assert m, f"{name}: Diagnosis must open with the dashboard panel and the first query"
        assert m.group("dash") in panels, f"{name}: no dashboard {m.group('dash')!r}"
        assert m.group("panel") in panels[m.group("dash")], (
            f"{name}: dashboard {m.group('dash')!r} has no panel {m.group('panel')!r}"
        )
        assert m.group("query").strip(), name
