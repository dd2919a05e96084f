"""Webhook deliveries per second accepted end to end, on loopback.

The server runs in a child process (so the senders do not share its CPU and event loop): either
the exporter's receiver (size/type/header/timestamp checks, body read, HMAC, JSON parse, the
ordered intake, the lifecycle model, metrics) or, as the floor, a bare aiohttp handler that
reads the body and answers 204. The same pre-signed POSTs go to both from `--senders` concurrent
keep-alive connections, one workload per sender so each workload's deliveries stay in order.
Rounds alternate between the two servers; the best round of each is printed.

    python -m bench.webhook [--events N] [--senders K] [--rounds R]
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

from bench._common import header, table

SECRET = b"bench-secret-0123456789abcdef"


def _serve(kind: str, secret_dir: str, port_q: Any) -> None:
    from aiohttp import web

    from exporter.sinks.metrics.webhook import WebhookMetrics
    from exporter.sources.intake import Intake
    from exporter.sources.webhook import PATH, SecretFiles, WebhookReceiver
    from exporter.web.app import start_site
    from exporter.wiring.events import Pipeline

    async def main() -> None:
        app = web.Application()
        if kind == "bare":
            async def bare(request: web.Request) -> web.Response:
                await request.read()
                return web.Response(status=204)

            app.router.add_post(PATH, bare)
        else:
            pipeline = Pipeline()
            metrics = WebhookMetrics(pipeline.registry)
            secret = Path(secret_dir) / "secret"
            WebhookReceiver(Intake(pipeline, metrics), SecretFiles([secret], metrics),
                            metrics).install(app)
        _, url = await start_site(app, "127.0.0.1:0")
        port_q.put(url)
        await asyncio.Event().wait()

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


async def _send_all(url: str, plan: dict[str, list[tuple[bytes, dict[str, str]]]]) -> float:
    target = url + "/v1/webhooks/events"
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as s:
        async def sender(items: list[tuple[bytes, dict[str, str]]]) -> None:
            for body, headers in items:
                async with s.post(target, data=body, headers=headers) as r:
                    await r.read()
                    if r.status >= 300:
                        raise RuntimeError(f"HTTP {r.status}")

        t0 = time.perf_counter()
        await asyncio.gather(*(sender(v) for v in plan.values()))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    header(f"webhook deliveries: {args.events} events, {args.senders} concurrent senders")
    plan = _deliveries(args.events, args.senders)
    total = sum(len(v) for v in plan.values())
    ctx = mp.get_context("spawn")
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "secret").write_bytes(SECRET)
        for r in range(args.rounds):
            for kind in (("bare", "exporter") if r % 2 == 0 else ("exporter", "bare")):
                q = ctx.Queue()
                proc = ctx.Process(target=_serve, args=(kind, d, q), daemon=True)
                proc.start()
                try:
                    url = q.get(timeout=30)
                    secs = asyncio.run(_send_all(url, plan))
                finally:
                    proc.terminate()
                    proc.join()
                best[kind] = min(best.get(kind, float("inf")), secs)
    rows = [["server", "deliveries/s", "best round"]]
    for kind in ("bare", "exporter"):
        rows.append([kind if kind == "exporter" else "bare aiohttp 204 (floor)",
                     f"{total / best[kind]:,.0f}", f"{best[kind]:.2f} s"])
    print(table(rows))
    print(f"exporter at {best['bare'] / best['exporter']:.0%} of the floor")


if __name__ == "__main__":
    main()
