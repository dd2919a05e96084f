"""A shard skips other shards' UnitSignals on their metadata: they never reach its model or its
exposition, and `zaroz_kube_objects_decoded_total` shows them dropped before their spec and
status were decoded."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from exporter.model.sharding import Shard
from exporter.model.signal import UnitSignal
from tests.unitsignals import status
from tests.waiting import until
from zaroz_sim.kube.emulator import KubeEmulator

WORKLOADS = [f"wl-{i}" for i in range(12)]
SHARD = Shard(0, 3)


def spec(key: str) -> dict:
    return {"unitId": f"unit-{key}", "key": key, "contractVersion": 1, "generation": 1,
            "userData": {}, "allocation": None, "draining": False}


async def scrape(url: str) -> tuple[set[str], dict[str, float]]:
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    workloads, decoded = set(), {}
    for fam in text_string_to_metric_families(text):
        for sm in fam.samples:
            if sm.name.startswith("zaroz_unitsignal_") and "workload" in sm.labels:
                workloads.add(sm.labels["workload"])
            elif sm.name == "zaroz_kube_objects_decoded_total":
                decoded[sm.labels["depth"]] = sm.value
    return workloads, decoded


async def test_a_shard_never_exports_nor_decodes_another_shards_unitsignals():
    mine = {w for w in WORKLOADS if SHARD.owns(w)}
    assert mine and mine != set(WORKLOADS)
    kube = KubeEmulator(seed=4)
    names = {}
    for i, wl in enumerate(WORKLOADS):
        for j in range(3):  # half of them in a namespace named like another workload
            ns = WORKLOADS[(i + 1) % len(WORKLOADS)] if j == 2 else "units"
            names[(ns, f"{wl}-u{j}")] = wl
            kube.create(ns, f"{wl}-u{j}", spec(f"{wl}-u{j}"),
                        labels={"units.zaroz.cloud/workload": wl}, status=status(seq=1))
    url = await kube.start()
    args = build_parser().parse_args([
        "serve", "--listen", "127.0.0.1:0", "--kube", "on", "--kube-api-url", url,
        "--total-shards", str(SHARD.total), "--shard", str(SHARD.index)])
    running = await start(ServeConfig.from_args(args))
    seen: list[object] = []
    model = running.kube.reflectors[0].handler.model
    real = model.upsert
    model.upsert = lambda obj, now: (seen.append(obj), real(obj, now))[1]
    try:
        await until(running.ready, timeout=10)
        foreign_listed = sum(1 for wl in names.values() if wl not in mine)
        writes = 0
        for ns, name in names:  # the agents' status writes, over the watch
            for seq in (2, 3):
                kube.patch_status(ns, name, {"seq": seq, "accepting": seq == 3})
                writes += 1
        total = len(names) + writes
        foreign = foreign_listed * 3
        requests = running.pipeline.registry["zaroz_kube_requests_total"].series

        def watching() -> bool:  # the watch is open: the status writes reach the model
            s = requests.get(("*", "watch", "200"))
            return s is not None and s.value >= 1  # type: ignore[union-attr]

        await until(lambda: watching()
                    and sum(model.objects[k].state.status_seq == 3 for k in model.objects)
                    == len(model.objects) > 0, timeout=10)
        workloads, decoded = await scrape(running.url)
        assert workloads == mine  # every own workload, never another shard's
        assert decoded == {"metadata": foreign, "object": total - foreign}
        assert seen and all(type(o) is UnitSignal for o in seen)
        assert {names[(o.metadata.namespace, o.metadata.name)] for o in seen} == mine
    finally:
        await running.stop()
        await kube.stop()
