"""The demo's live overview in a real browser (Debian's headless Chromium): no console error, no
chart without data, no text overflowing its box, at a wide and a narrow window."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp

from exporter.commands.demo import start_demo
from tests.browser import chromium, look
from tests.test_overview_demo import DEADLINE_S, complete, demo_args


async def test_live_overview_in_chromium(tmp_path: Path) -> None:
    chromium()
    start = time.monotonic()
    demo = await start_demo(demo_args())
    workloads = [w.id for w in demo.feed.simulator.workloads]
    try:
        async with aiohttp.ClientSession() as s:
            problems = ["not asked yet"]
            while problems and time.monotonic() - start < DEADLINE_S:
                async with s.get(f"{demo.running.url}/api/overview") as r:
                    problems = complete(await r.json(), workloads)
                await asyncio.sleep(0.5)
            assert not problems
        seen = await look(f"{demo.running.url}/", tmp_path, "overview")
    finally:
        await demo.stop()
    # 3 measurements' histograms and 2 outcome bars per workload, at least
    seen.assert_looks_right(min_charts=5 * len(workloads))
