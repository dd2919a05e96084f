"""Webhook deliveries per second accepted end to end, on loopback, and their response time.

The server runs in a child process (so the senders do not share its CPU and event loop): either
the exporter's receiver (size/type/header/timestamp checks, body read, HMAC, JSON parse, the
ordered intake, the lifecycle model, metrics) or, as the floor, a bare aiohttp handler that
reads the body and answers 204. The exporter runs three ways: without a state dir (the 200 goes
once the event is applied: nothing is durable), with one (`--state-dir`: the 200 waits for a
checkpoint that covers the delivery; deliveries that arrive together share one commit,
wiring/state/commits.py), and, for comparison, with one commit per delivery. The same
pre-signed POSTs go to each from `--senders` concurrent keep-alive connections, one workload per
sender so each workload's deliveries stay in order. Rounds rotate the servers; the best round
of each is printed, with the median and p99 response time of that round and, with a state dir,
how many deliveries each commit covered.

    python -m bench.webhook [--events N] [--senders K] [--rounds R] [--state-root DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench._common import header, ms, table

SECRET = b"bench-secret-0123456789abcdef"


KINDS = ("bare", "exporter", "group", "each")
LABELS = {
    "bare": "bare aiohttp 204 (floor)",
    "exporter": "exporter, no state dir",
    "group": "exporter, --state-dir (group commit)",
    "each": "exporter, --state-dir, one commit per delivery",
}


def _serve(kind: str, secret_dir: str, state_dir: str, port_q: Any, stats_q: Any) -> None:
    from aiohttp import web

    from exporter.sinks.metrics.webhook import WebhookMetrics
    from exporter.sources.intake import Intake
    from exporter.sources.webhook import PATH, SecretFiles, WebhookReceiver
    from exporter.web.app import start_site
    from exporter.wiring.events import Pipeline
    from exporter.wiring.state.checkpoint import Checkpointer, CheckpointError
    from exporter.wiring.state.commits import GroupCommit

    class EachDelivery:
        """The naive way: one save begun and awaited per delivery."""

        def __init__(self, checkpointer: Checkpointer) -> None:
            self.checkpointer = checkpointer
            self.begun = 0

        async def covered(self) -> bool:
            self.begun += 1
            try:
                await self.checkpointer.begin_save()()
            except CheckpointError:
                return False
            return True

    async def main() -> None:
        app = web.Application()
        durability: GroupCommit | EachDelivery | None = None
        if kind == "bare":
            async def bare(request: web.Request) -> web.Response:
                await request.read()
                return web.Response(status=204)

            app.router.add_post(PATH, bare)
        else:
            pipeline = Pipeline()
            metrics = WebhookMetrics(pipeline.registry)
            secret = Path(secret_dir) / "secret"
            if kind != "exporter":
                checkpointer = Checkpointer(state_dir, pipeline)
                checkpointer.load()
                checkpointer.save()  # the first save writes the store whole: not measured
                durability = GroupCommit(checkpointer) if kind == "group" else \
                    EachDelivery(checkpointer)
            WebhookReceiver(Intake(pipeline, metrics), SecretFiles([secret], metrics),
                            metrics, durability=durability).install(app)
        _, url = await start_site(app, "127.0.0.1:0")
        port_q.put(url)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, stats_q.get)  # the parent asks once it has sent all
        port_q.put(durability.begun if durability is not None else 0)

    asyncio.run(main())


def _deliveries(events: int, senders: int) -> dict[str, list[tuple[bytes, dict[str, str]]]]:
    """Pre-signed (body, headers) per workload: signing is the platform's cost, not ours."""
    from exporter.sources.webhook import sign
    from zaroz_sim.scenario import SimConfig, Simulator

    cfg = SimConfig(seed=3, workloads=senders, arrival_rate=2.0)
    sim = Simulator(cfg)
    per = events // senders
    out: dict[str, list[tuple[bytes, dict[str, str]]]] = {}
    t = int(time.time())
    end = cfg.start_ns
    while min((len(v) for v in out.values()), default=0) < per:
        end += 60 * 10**9
        for w, evs in sim.events_until(end).items():
            lst = out.setdefault(w, [])
            for e in evs:
                if len(lst) < per:
                    body = orjson.dumps(e)
                    lst.append((body, {
                        "Content-Type": "application/json", "Zaroz-Workload": w,
                        "Zaroz-Delivery": f"dlv_{w}_{e['seq']}",
                        "Zaroz-Signature": f"t={t},v1={sign(SECRET, t, body)}"}))
    return out


async def _send_all(url: str, plan: dict[str, list[tuple[bytes, dict[str, str]]]],
                    ) -> tuple[float, list[float]]:
    """Seconds to deliver the whole plan, and each delivery's response time."""
    target = url + "/v1/webhooks/events"
    connector = aiohttp.TCPConnector(limit=0)
    times: list[float] = []
    async with aiohttp.ClientSession(connector=connector) as s:
        async def sender(items: list[tuple[bytes, dict[str, str]]]) -> None:
            for body, headers in items:
                t = time.perf_counter()
                async with s.post(target, data=body, headers=headers) as r:
                    await r.read()
                    if r.status >= 300:
                        raise RuntimeError(f"HTTP {r.status}")
                times.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(sender(v) for v in plan.values()))
        return time.perf_counter() - t0, times


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--state-root", default=None,
                    help="where the state dirs go (a real disk: fsync is the cost measured); "
                         "default: the system's temporary directory")
    args = ap.parse_args()
    header(f"webhook deliveries: {args.events} events, {args.senders} concurrent senders")
    plan = _deliveries(args.events, args.senders)
    total = sum(len(v) for v in plan.values())
    ctx = mp.get_context("spawn")
    best: dict[str, tuple[float, list[float], int]] = {}
    with tempfile.TemporaryDirectory() as d, \
            tempfile.TemporaryDirectory(dir=args.state_root) as states:
        (Path(d) / "secret").write_bytes(SECRET)
        for r in range(args.rounds):
            order = KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]
            for kind in order:
                q, stats = ctx.Queue(), ctx.Queue()
                state = str(Path(states) / f"{kind}-{r}")
                proc = ctx.Process(target=_serve, args=(kind, d, state, q, stats), daemon=True)
                proc.start()
                try:
                    url = q.get(timeout=30)
                    secs, times = asyncio.run(_send_all(url, plan))
                    stats.put(None)
                    commits = q.get(timeout=30)
                finally:
                    proc.terminate()
                    proc.join()
                if kind not in best or secs < best[kind][0]:
                    best[kind] = (secs, times, commits)
    rows = [["server", "deliveries/s", "median", "p99", "deliveries per commit"]]
    for kind in KINDS:
        secs, times, commits = best[kind]
        per = f"{total / commits:.1f}" if commits else "-"
        rows.append([LABELS[kind], f"{total / secs:,.0f}", ms(_quantile(times, 0.5)),
                     ms(_quantile(times, 0.99)), per])
    print(table(rows))
    print(f"exporter at {best['bare'][0] / best['exporter'][0]:.0%} of the floor; "
          f"with --state-dir at {best['exporter'][0] / best['group'][0]:.0%} of that")


if __name__ == "__main__":
    main()
