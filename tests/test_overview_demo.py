"""The demo's overview (`/` and `/api/overview`): within 30 s of start every workload has
readiness, ack and drain figures, and the simulator's stuck agents and invalid specs are listed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from exporter.cli import build_parser
from exporter.commands.demo import Demo, start_demo
from zaroz_sim.cluster import ClusterMirror

DEADLINE_S = 30.0


def demo_args() -> Any:
    return build_parser().parse_args(["demo", "--listen", "127.0.0.1:0", "--log-level", "warning"])


def expected_stuck(mirror: ClusterMirror) -> tuple[set[str], set[str]]:
    """UnitSignals whose agent refuses (invalid spec) or stopped acknowledging (stuck), with a
    generation it has not observed: (all of them, the invalid-spec ones)."""
    behind, invalid = set(), set()
    for u in mirror.units.values():
        if (u.stuck or u.invalid) and u.spec["generation"] > u.status.get("observedGeneration", 1):
            behind.add(f"{u.namespace}/{u.name}")
            if u.invalid:
                invalid.add(f"{u.namespace}/{u.name}")
    return behind, invalid


def complete(data: dict[str, Any], workloads: list[str]) -> list[str]:
    """What is still missing from the overview (empty: done)."""
    missing = []
    seen = {w["workload"]: w for w in data["workloads"]}
    for wl in workloads:
        w = seen.get(wl)
        if w is None:
            missing.append(f"{wl} absent")
            continue
        for m in ("ready", "ack", "drain"):
            fig = w["measurements"][m]
            if fig["count"] == 0 or None in (fig["p50"], fig["p95"], fig["p99"]):
                missing.append(f"{wl} {m}")
    return missing


def listed(data: dict[str, Any], key: str) -> set[str]:
    return {f"{r['namespace']}/{r['name']}" for r in data["unitsignals"][key]}


async def test_demo_overview_within_30s() -> None:
    start = time.monotonic()
    demo: Demo = await start_demo(demo_args())
    workloads = [w.id for w in demo.feed.simulator.workloads]
    url = demo.running.url
    problems: list[str] = ["not asked yet"]
    try:
        async with aiohttp.ClientSession() as s:
            while time.monotonic() - start < DEADLINE_S:
                async with s.get(f"{url}/api/overview") as r:
                    assert r.status == 200
                    data = await r.json()
                behind, invalid = expected_stuck(demo.mirror)
                problems = complete(data, workloads)
                problems += [f"stuck {k} not listed" for k in
                             behind - listed(data, "oldest_unobserved")]
                problems += [f"invalid {k} not listed" for k in
                             invalid - listed(data, "stuck_invalid_spec")]
                if not behind:
                    problems.append("the simulator has no stuck UnitSignal yet")
                if not invalid:
                    problems.append("the simulator has no invalid spec yet")
                if not problems:
                    break
                await asyncio.sleep(1.0)
            assert not problems, f"after {DEADLINE_S} s: {problems}"
            async with s.get(f"{url}/") as r:
                html = await r.text()
                assert r.headers["Content-Type"].startswith("text/html")
    finally:
        await demo.stop()
    for wl in workloads:
        assert f'data-workload="{wl}"' in html
    for key in invalid:
        assert f'data-unitsignal="{key}"' in html
    oldest = [f"{r['namespace']}/{r['name']}" for r in data["unitsignals"]["oldest_unobserved"]]
    assert sum(f'data-unitsignal="{k}"' in html for k in oldest[:20]) >= min(10, len(oldest))
    assert 'href="metrics"' in html and 'href="readyz"' in html
    assert 'href="dashboards/zaroz-units.json"' in html and 'href="docs/metrics.md"' in html
    assert "<script" not in html and "http://" not in html.split("</header>")[1]
    assert "src=" not in html  # everything inline: nothing to fetch
