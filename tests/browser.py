"""Debian's headless Chromium, driven by Playwright (the browser is the system's: nothing is
downloaded): open a page, collect console errors, and measure what a person would see wrong."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tests.components import missing, require

FLAGS = ["--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]

# Elements whose content is wider than their box (text overflowing), charts with no data mark,
# and whether the page itself scrolls sideways.
MEASURE = """() => {
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
    (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '');
  const overflow = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el instanceof SVGElement || el.clientWidth === 0) continue;
    if (el.scrollWidth > el.clientWidth + 1)
      overflow.push(name(el) + ' ' + el.scrollWidth + '>' + el.clientWidth + ' ' +
                    (el.textContent || '').slice(0, 40));
  }
  const empty = [];
  const charts = document.querySelectorAll('svg.chart');
  for (const svg of charts) {
    const marks = [...svg.querySelectorAll('rect.bar, polyline')].filter((m) => {
      const b = m.getBBox();
      return b.width > 0 && (b.height > 0 || m.tagName === 'polyline');
    });
    if (marks.length === 0 || Number(svg.dataset.points || 0) === 0)
      empty.push(svg.closest('[id]') ? svg.closest('[id]').id : name(svg));
  }
  const doc = document.documentElement;
  return {overflow, empty, charts: charts.length,
          pageScrollsSideways: doc.scrollWidth > doc.clientWidth + 1};
}"""


@dataclass
class Seen:
    errors: list[str] = field(default_factory=list)
    overflow: list[str] = field(default_factory=list)
    empty_charts: list[str] = field(default_factory=list)
    charts: int = 0
    scrolls_sideways: bool = False
    screenshots: list[Path] = field(default_factory=list)

    def assert_looks_right(self, min_charts: int) -> None:
        """No console error, no chart without data, no text out of its box, no sideways
        scrolling, at least `min_charts` charts, and screenshots with something in them."""
        print("screenshots:", *self.screenshots)
        assert not self.errors, self.errors
        assert not self.empty_charts, self.empty_charts
        assert not self.overflow, self.overflow
        assert not self.scrolls_sideways
        assert self.charts >= min_charts, self.charts
        assert all(p.stat().st_size > 10_000 for p in self.screenshots)


def chromium() -> str:
    path = require("chromium")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing("playwright is not installed (pip install -e '.[test]')")
    return path


async def look(url: str, shots: Path, name: str,
               widths: tuple[int, ...] = (1400, 820)) -> Seen:
    """Open `url` at each window width; screenshots go to `shots` (and to
    $ZAROZ_SCREENSHOT_DIR when set, to keep them)."""
    from playwright.async_api import async_playwright

    exe = chromium()
    seen = Seen()
    keep = os.environ.get("ZAROZ_SCREENSHOT_DIR")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=exe, args=FLAGS,
                                          chromium_sandbox=False, headless=True)
        try:
            for width in widths:
                page = await browser.new_page(viewport={"width": width, "height": 900})
                page.on("console", lambda m: seen.errors.append(
                        f"console error: {m.text} ({m.location.get('url')})")
                        if m.type == "error" else None)
                page.on("pageerror", lambda e: seen.errors.append(f"page error: {e}"))
                page.on("requestfailed", lambda r: seen.errors.append(f"request failed: {r.url}"))
                resp = await page.goto(url, wait_until="load")
                if resp is None or resp.status != 200:
                    seen.errors.append(f"{url}: HTTP {resp.status if resp else 'none'}")
                m = await page.evaluate(MEASURE)
                seen.overflow += [f"@{width}px {o}" for o in m["overflow"]]
                seen.empty_charts += [f"@{width}px {e}" for e in m["empty"]]
                seen.charts = max(seen.charts, m["charts"])
                seen.scrolls_sideways |= m["pageScrollsSideways"]
                for base in [shots] + ([Path(keep)] if keep else []):
                    base.mkdir(parents=True, exist_ok=True)
                    path = base / f"{name}-{width}.png"
                    await page.screenshot(path=str(path), full_page=True)
                    seen.screenshots.append(path)
                await page.close()
        finally:
            await browser.close()
    return seen
