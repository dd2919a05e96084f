"""The fleet bench's generator at a tiny scale: its log is a valid, gapless, skew-free lifecycle,
and the units it says are live are the units the model tracks."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp

from exporter.contract import is_valid_event
from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from zaroz_sim.fleet import Backlog, FleetShape, LiveFleet, append_all, fleet_route

_S = 1_000_000_000
START = 1_764_460_800 * _S


def fleet_log(shape: FleetShape, ticks: int, rate: float) -> tuple[LiveFleet, dict[str, list]]:
    backlog = Backlog(shape)
    live = LiveFleet(backlog, rate, shape.seed)
    logs = {wl.id: [backlog.event(w, s) for s in range(1, shape.backlog_len(w) + 1)]
            for w, wl in enumerate(backlog.workloads)}
    for i in range(ticks + 1):  # the first tick only starts the clock
        for wid, events in live.tick(START + i * _S // 10).items():
            logs[wid].extend(events)
    return live, logs


def test_backlog_and_stream_are_a_clean_lifecycle() -> None:
    shape = FleetShape(workloads=3, units=301, start_ns=START)
    assert [shape.units_of(w) for w in range(3)] == [101, 100, 100]
    live, logs = fleet_log(shape, ticks=600, rate=200)  # 60 s at 200 events/s
    tracked = 0
    types: Counter[str] = Counter()
    for events in logs.values():
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert all(is_valid_event(e) for e in events)
        rec = Recorder()
        log = WorkloadLog(rec)
        for e in events:
            assert log.offer(e, "route") == "accepted"
        tracked += len(log.units)
        types.update(e["type"] for e in events)
        assert rec.of("skew") == [] and rec.of("gap") == [] and rec.of("invalid") == []
        assert len(rec.of("ready")) == sum(1 for e in events if e["type"] == "unit.ready")
    assert tracked == live.units_tracked()
    streamed = sum(len(v) for v in logs.values()) - shape.backlog_events()
    assert streamed == live.emitted and 11_000 <= streamed <= 12_001  # the rate
    # every kind of step of the stream happened
    for kind in ("unit.allocated", "unit.allocation_delivered", "unit.busy", "unit.idle",
                 "unit.draining", "unit.stopped", "unit.destroyed", "unit.not_accepting"):
        assert types[kind] > 0, kind
    assert types["unit.created"] > shape.units  # new units arrived
    assert types["unit.destroyed"] < types["unit.created"] - shape.units + 10


def test_route_serves_the_backlog_then_the_stream() -> None:
    shape = FleetShape(workloads=2, units=700, start_ns=START)

    async def main() -> None:
        server, backlog = fleet_route(shape)
        live = LiveFleet(backlog, 500)
        url = await server.start()
        try:
            live.tick(START)
            append_all(server, live.tick(START + _S).items())
            async with aiohttp.ClientSession() as s:
                async with s.get(url + "/v1/workloads") as r:
                    assert [w["id"] for w in (await r.json())["workloads"]] == ["wl-1", "wl-2"]
                for w, wl in enumerate(backlog.workloads):
                    seqs: list[int] = []
                    while True:
                        q = f"?after={len(seqs)}&limit=1000&wait=0"
                        async with s.get(f"{url}/v1/workloads/{wl.id}/events{q}") as r:
                            body = await r.json()
                        if not body["events"]:
                            break
                        seqs += [e["seq"] for e in body["events"]]
                    assert seqs == list(range(1, body["head_seq"] + 1))
                    assert body["head_seq"] == live.seq[w] > shape.backlog_len(w)
        finally:
            await server.stop()

    asyncio.run(main())
