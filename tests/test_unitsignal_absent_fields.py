"""A status field the agent patched to null is absent on a real API server (RFC 7386): end to
end (the emulator's write path, `serve` over HTTP, /metrics), an absent field gives exactly the
series a null one gives."""

from __future__ import annotations

from typing import Any

import aiohttp

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.simlogs import parse
from tests.unitsignals import status
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.store import API_VERSION, KIND

WL = "units.zaroz.cloud/workload"
NULLED = ("signalledReady", "activity", "activitySince", "shutdownRequestedAt", "allocationAck")


def obj(name: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": name, "labels": {WL: "wl-1"}},
            "spec": {"unitId": f"unit-{name}", "key": name, "contractVersion": 1,
                     "generation": 2, "allocation": None, "draining": False}}


def per_object(samples: dict[tuple[str, frozenset], float], name: str) -> dict[Any, float]:
    """`name`'s per-UnitSignal series, the labels naming it left out (so two objects compare)."""
    out = {}
    for (metric, labels), v in samples.items():
        if ("unitsignal", name) in labels and "seconds" not in metric:
            rest = frozenset(kv for kv in labels if kv[0] not in ("unitsignal", "key", "unit_id"))
            out[(metric, rest)] = v
    return out


async def test_absent_status_fields_read_as_null_end_to_end():
    emu = KubeEmulator(seed=7, bookmark_interval_s=0.2)
    url = await emu.start()
    busy = status(observedGeneration=1, accepting=True, activity="busy",
                  activitySince="2026-12-01T10:00:00Z", signalledReady="2026-12-01T09:59:00Z",
                  allocationAck="a-1", seq=3)
    nulls = {k: None for k in NULLED} | {"accepting": False, "seq": 4}
    for name in ("nulled", "absent", "busy"):
        emu.create_object("ns-a", obj(name), manager="kernel")
        emu.patch_object("ns-a", name, {"status": busy}, "merge", subresource="status",
                         manager="zaroz-agent")
    # The same status both ways: an update keeps the nulls, a merge patch deletes them.
    current = emu.get("ns-a", "nulled")
    current["status"] = busy | nulls
    emu.update_object("ns-a", "nulled", current, subresource="status", manager="zaroz-agent")
    emu.patch_object("ns-a", "absent", {"status": nulls}, "merge", subresource="status",
                     manager="zaroz-agent")
    kept, lacking = emu.get("ns-a", "nulled")["status"], emu.get("ns-a", "absent")["status"]
    assert all(k in kept and kept[k] is None for k in NULLED)
    assert not set(NULLED) & set(lacking)
    args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "on",
                                      "--kube-api-url", url])
    running = await start(ServeConfig.from_args(args))
    try:
        await until(running.ready, timeout=10, interval=0.05)
        async with aiohttp.ClientSession() as s, s.get(f"{running.url}/metrics") as r:
            samples = parse(await r.text())
    finally:
        await running.stop()
        await emu.stop()
    nulled, absent, other = (per_object(samples, n) for n in ("nulled", "absent", "busy"))
    assert len(nulled) >= 8
    assert absent == nulled
    assert other != nulled  # the series do tell statuses apart
    valid = [v for (m, _), v in absent.items() if m == "zaroz_unitsignal_status_valid"]
    assert valid == [1]
    violations = [v for (m, labels), v in samples.items()
                  if m == "zaroz_unitsignal_conformance_violations_total"
                  and ("rule", "status_schema") in labels]
    assert sum(violations) == 0
