"""UnitSignals at cluster scale: initial sync, memory, watch throughput and scrape at 100k objects.

The Kubernetes half of the exporter must hold every UnitSignal of a large cluster, so this
measures what that costs, each figure next to the alternative it is judged against, in one run:

1. initial sync: a real `KubeSource` (page size 500) against `KubeEmulator` on loopback until
   `synced`, against the exporter's own share (the same LIST page bodies decoded and applied
   page by page with the collector paused, as the reflector does; and, as the alternative, with
   the collector running), and against fetching those pages without decoding them (what the
   emulator and the transport cost). The emulator is Python too and runs in its own process (so
   it has its own core and its memory is not billed to the exporter); its LIST handler time is
   reported; it runs beside ours, since each page is asked for before the last is applied.
   Beside it, the same sync by the streaming list (`--kube-watch-list`: one watch with
   sendInitialEvents, the objects as ADDED events, no LIST response at all), with the LIST
   responses each case made the emulator serve (count, largest, total).
2. memory: RSS of processes that hold only the exporter side (fed over HTTP; fed from the page
   bytes), and tracemalloc of what the model and registry keep.
3. watch events: MODIFIED watch lines (status writes: seq, accepting, activity, acknowledged
   generations; some spec generation bumps) decoded and applied with `model.upsert`, against
   `orjson.loads` alone (the floor) and against the reflector's own path (`_decode_event` +
   `Reflector._apply`, with metrics); then end to end through the emulator's WATCH.
4. scrape: `b"".join(render(registry))` after the sync and after 1% of the objects changed, and
   through `MetricsServer` over HTTP (curl);
5. against a naive exporter: prometheus_client `Gauge` children per object for the same metrics,
   set from the same objects, `generate_latest()` interleaved with ours; its RSS in its own
   process.

Run: python -m bench.cluster [--objects N] [--namespaces N] [--workloads N] [--user-data B]
                             [--sync-repeat K] [--per-namespace] [--repeat K] [--events N]
                             [--http-events N] [--scrape-repeat K] [--http-repeat K]
                             [--traced-objects N] [--no-memory] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import multiprocessing as mp
import pstats
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
import tracemalloc
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from bench._common import (
    OUT,
    child_env,
    header,
    interleaved,
    mib,
    ms,
    obey,
    proc_status_kib,
    reset_peak_rss,
    spread,
    table,
)
from exporter.contract import is_valid_unit_signal_spec, is_valid_unit_signal_status
from exporter.model.sharding import Shard
from exporter.model.unitsignals import DRAIN_REASONS, STATUS_FIELDS, UnitSignalModel
from exporter.sinks.metrics.exposition import render
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.kube import KubeMetrics
from exporter.sinks.metrics.unitsignals import label_name
from exporter.sources.kube.api import KubeApi, _decode_event, _decode_typed_event
from exporter.sources.kube.config import from_url
from exporter.sources.kube.reflector import KubeSource, Reflector
from exporter.sources.kube.typed import decode_event, decode_list
from exporter.timestamps import parse_rfc3339_ns
from exporter.web.app import MetricsServer, start_site
from exporter.wiring.unitsignals import NamespaceHandler, build_cluster
from zaroz_sim.kube.emulator import KubeEmulator
from zaroz_sim.kube.store import rfc3339_s

NS = 1_000_000_000
PAGE_SIZE = 500
PROTOBUF_ACCEPT = ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
                   "encoding=delimited")
ALLOWLIST = ("team",)  # one allowlisted label, so zaroz_unitsignal_labels is exported too
LIST_PATH = "/apis/units.zaroz.cloud/v1/unitsignals"
WORKLOAD_LABEL = "units.zaroz.cloud/workload"
CHANGED = 0.01  # share of objects changed between scrapes

TARGET_SYNC_S = 2.5
TARGET_RSS_MIB = 400.0
TARGET_PEAK_MIB = 600.0
TARGET_TURNS_MIB = 445.0  # RSS after text and protobuf scrapers took turns
TARGET_FOREIGN_US = 2.0
TARGET_STREAM_S = 80_000.0
TARGET_EVENTS_S = 100_000.0
TARGET_SCRAPE_S = 0.5
TARGET_RATIO = 10.0

TEAMS = ("payments", "search", "matchmaking", "render-farm", "edge", "ml-platform", "chat", "ads",
         "video", "identity")  # fmt: skip
ENVS = ("prod", "staging", "canary", "eu-west-1", "us-east-2")
ROLES = ("api", "worker", "batch", "gateway", "shard", "relay")
PROFILES = ("competitive-eu", "casual-na", "ranked-apac", "training", "tournament-finals")


# -- the objects ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """How many objects and how they spread; the same in every process of a run."""

    objects: int
    namespaces: int
    workloads: int
    user_data: int  # bytes of spec.userData, serialised
    seed: int

    def namespace_names(self) -> list[str]:
        return [f"zaroz-{TEAMS[i % len(TEAMS)]}-{ENVS[i // len(TEAMS) % len(ENVS)]}"
                + (f"-{i // (len(TEAMS) * len(ENVS))}" if i >= len(TEAMS) * len(ENVS) else "")
                for i in range(self.namespaces)]  # fmt: skip

    def workload_names(self) -> list[tuple[str, str]]:
        """(namespace, workload): workloads spread round-robin over the namespaces."""
        nss = self.namespace_names()
        return [(nss[i % len(nss)], f"{TEAMS[i % len(TEAMS)]}-{ROLES[i // len(TEAMS) % 6]}-{i:02d}")
                for i in range(self.workloads)]  # fmt: skip


class FakeClock:
    """The emulator's clock: starts a day ago and ticks on every write, so creation, readiness
    and allocation timestamps are in the past and distinct, as in a cluster that has been up."""

    def __init__(self, start_ns: int, step_ns: int) -> None:
        self.now_ns = start_ns
        self.step_ns = step_ns

    def __call__(self) -> int:
        self.now_ns += self.step_ns
        return self.now_ns


def populate(emu: KubeEmulator, shape: Shape, clock: FakeClock) -> None:
    """Create every UnitSignal through the emulator's write API (a spec write, then the agent's
    status write), so metadata, managedFields and resourceVersions are what the API server
    would return. Mix: 85% ready (80% of them accepting, idle or busy), 30% allocated (90% of
    those acknowledged), 8% with a generation the agent has not observed yet, 3% draining, 0.5%
    with a spec that fails the schema."""
    rng = random.Random(shape.seed)
    workloads = shape.workload_names()
    pad = {"profile": "", "region": "", "token": ""}
    for i in range(shape.objects):
        ns, wl = workloads[i % len(workloads)]
        name = f"{wl}-{rng.getrandbits(40):010x}"
        created = clock.now_ns + clock.step_ns
        ts = lambda s, c=created: rfc3339_s(c + int(s * NS))  # noqa: E731
        user = {"profile": rng.choice(PROFILES), "region": rng.choice(ENVS[3:]), "token": ""}
        pad_len = max(0, shape.user_data - len(orjson.dumps(user | pad)))
        user["token"] = f"{rng.getrandbits(4 * pad_len + 4):x}"[:pad_len]
        generation, alloc = 1, None
        if rng.random() < 0.30:
            generation = 2
            alloc = {"id": f"alloc-{rng.getrandbits(64):016x}", "generation": 2,
                     "allocatedAt": ts(rng.uniform(60, 3600))}  # fmt: skip
        draining = rng.choice(("scale_down", "replace")) if rng.random() < 0.03 else False
        spec = {"unitId": f"unit-{rng.getrandbits(64):016x}",
                "key": name.upper() if rng.random() < 0.005 else name, "contractVersion": 1,
                "generation": generation, "labels": {"tier": rng.choice(("gold", "silver"))},
                "userData": user, "allocation": alloc, "draining": draining}  # fmt: skip
        ready = rng.random() < 0.85
        accepting = ready and not draining and rng.random() < 0.8
        activity = rng.choice(("idle", "idle", "busy")) if ready else None
        status = {
            "observedGeneration": generation - (1 if rng.random() < 0.08 else 0),
            "agentVersion": rng.choice(("1.4.2", "1.5.0")),
            "signalledReady": ts(rng.uniform(3, 60)) if ready else None,
            "accepting": accepting,
            "activity": activity,
            "activitySince": ts(rng.uniform(60, 7200)) if activity else None,
            "shutdownRequestedAt": ts(rng.uniform(3600, 7200)) if draining else None,
            "allocationAck": alloc["id"] if alloc and rng.random() < 0.9 else None,
            "seq": rng.randrange(1, 2000),
        }
        labels = {WORKLOAD_LABEL: wl, "team": TEAMS[i % len(TEAMS)]}
        emu.create(ns, name, spec, labels=labels, status=status)


class Churn:
    """The next write to an object, as the platform makes them: mostly the agent's status writes
    (seq always moves; accepting or activity flips; a pending generation gets acknowledged),
    sometimes (5%) the kernel bumps the spec's generation."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def next(self, obj: dict[str, Any], ts: str) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        spec, status = obj["spec"], obj.get("status") or {}
        seq = status.get("seq", 0) + 1
        gen = spec["generation"]
        if status.get("observedGeneration", 0) < gen and rng.random() < 0.5:
            return "status", {"observedGeneration": gen, "seq": seq}
        r = rng.random()
        if r < 0.05:
            return "spec", {**spec, "generation": gen + 1}
        if r < 0.55:
            return "status", {"accepting": not status.get("accepting", False), "seq": seq}
        activity = "busy" if status.get("activity") == "idle" else "idle"
        return "status", {"activity": activity, "activitySince": ts, "seq": seq}


def apply_change(obj: dict[str, Any], kind: str, body: dict[str, Any], rv: int, ts: str) -> None:
    """What the API server does to an object for one write (the emulator's semantics, without
    its copies): merge-patched status or replaced spec with a generation bump, the writer's
    managedFields time, the new resourceVersion."""
    meta = obj["metadata"]
    meta["resourceVersion"] = str(rv)
    if kind == "spec":
        obj["spec"] = body
        meta["generation"] += 1
        sub = None
    else:
        status = dict(obj.get("status") or {})
        for k, v in body.items():
            if v is None:
                status.pop(k, None)
            else:
                status[k] = v
        obj["status"] = status
        sub = "status"
    for entry in meta["managedFields"]:
        if entry.get("subresource") == sub:
            entry["time"] = ts


class EventSource:
    """MODIFIED watch lines, as the API server sends them, from a continuing history of writes.

    Objects are kept serialised (one bytes each) and decoded only when written, so the source
    costs about the size of the objects, not the several times more their dicts would."""

    def __init__(self, objects: list[bytes], rv: int, seed: int) -> None:
        self.objects = objects
        self.rv = rv
        self.rng = random.Random(seed)
        self.churn = Churn(seed + 1)
        self.spec_writes = 0  # in the last batch

    def lines(self, n: int, distinct: bool = False) -> list[bytes]:
        """`n` writes; `distinct`: to `n` different objects (a 1% change before a scrape)."""
        ts = rfc3339_s(time.time_ns())
        picks = (self.rng.sample(range(len(self.objects)), n) if distinct
                 else [self.rng.randrange(len(self.objects)) for _ in range(n)])  # fmt: skip
        out = []
        self.spec_writes = 0
        for i in picks:
            obj = orjson.loads(self.objects[i])
            kind, body = self.churn.next(obj, ts)
            self.spec_writes += kind == "spec"
            self.rv += 1
            apply_change(obj, kind, body, self.rv, ts)
            raw = self.objects[i] = orjson.dumps(obj)
            out.append(b'{"type":"MODIFIED","object":' + raw + b"}\n")
        return out


# -- the emulator, in its own process ------------------------------------------------------------


def emulator_process(conn: Connection, shape: Shape) -> None:
    """Entry point of the emulator's process (multiprocessing, spawn)."""
    asyncio.run(_emulator_main(conn, shape))


async def _emulator_main(conn: Connection, shape: Shape) -> None:
    """Build the objects, serve them, and obey the parent: `stats` (LIST handler time so far),
    `profile` on/off (cProfile of every 10th LIST request), `write` n (n writes at once: the watch
    stream), `stop`."""
    clock = FakeClock(time.time_ns() - 86_400 * NS, NS // 4)
    emu = KubeEmulator(seed=shape.seed, clock=clock)
    t = time.perf_counter()
    populate(emu, shape, clock)
    build_s = time.perf_counter() - t
    stats: dict[str, float] = {"list_s": 0.0, "lists": 0, "list_bytes": 0, "list_max": 0}
    profilers: list[cProfile.Profile] = []

    @web.middleware
    async def timing(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.query.get("watch"):
            return await handler(request)  # type: ignore[no-any-return]
        # every 10th request only: profiling doubles the handler's time, the shares stay
        prof = profilers[0] if profilers and stats["lists"] % 10 == 0 else None
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        try:
            resp: web.StreamResponse = await handler(request)
            body = getattr(resp, "body", None)
            size = len(body) if isinstance(body, bytes) else resp.content_length or 0
            stats["list_bytes"] += size
            stats["list_max"] = max(stats["list_max"], size)
            return resp
        finally:
            if prof is not None:
                prof.disable()
            stats["list_s"] += time.perf_counter() - t0
            stats["lists"] += 1

    prepared: dict[str, Any] = {}  # the pre-rendered watch stream: rv -> its chunks
    stream_src: list[EventSource] = []

    @web.middleware
    async def prerendered(request: web.Request, handler: Any) -> web.StreamResponse:
        """A watch from the pre-rendered stream's resourceVersion gets its bytes, made before
        the clock started: what is measured is our HTTP path, not the emulator's writes."""
        chunks = prepared.pop(request.query.get("resourceVersion", ""), None)
        if not request.query.get("watch") or chunks is None:
            return await handler(request)  # type: ignore[no-any-return]
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        await response.write_eof()
        return response

    emu.app.middlewares.append(prerendered)
    emu.app.middlewares.append(timing)
    url = await emu.start()
    conn.send(("ready", url, build_s, emu.resource_version))
    rng = random.Random(shape.seed + 2)
    churn = Churn(shape.seed + 3)
    keys = list(emu.store.objects)

    def handle(msg: object) -> bool:
        cmd, *rest = msg  # type: ignore[misc]
        if cmd == "stats":  # rest[0]: start the largest-response count over after this
            conn.send(dict(stats))
            if rest and rest[0]:
                stats["list_max"] = 0
        elif cmd == "profile":  # on: True; off: False, answers the top 15
            if rest[0]:
                profilers[:] = [cProfile.Profile()]
            conn.send("" if rest[0] or not profilers else top_stats(profilers.pop(), 15))
        elif cmd == "write":
            ts = rfc3339_s(clock.now_ns)
            t = time.perf_counter()
            for _ in range(rest[0]):
                key = rng.choice(keys)
                ns, name = key.split("/", 1)
                kind, body = churn.next(emu.store.objects[key], ts)
                if kind == "spec":
                    emu.update_spec(ns, name, body)
                else:
                    emu.patch_status(ns, name, body)
            conn.send((time.perf_counter() - t, emu.resource_version))
        elif cmd == "prerender":  # n lines of MODIFIED events after the last, in 64 KiB chunks
            if not stream_src:
                # resourceVersions far ahead of the store's: no other watch (a stopped
                # reflector's request still on its way) can ask for the stream's first one
                stream_src.append(EventSource([emu.store.raw[k] for k in keys],
                                              emu.resource_version + 10**9, shape.seed + 4))
            src = stream_src[0]
            start = src.rv
            lines = src.lines(rest[0])
            chunks, buf, size = [], [], 0
            for line in lines:
                buf.append(line)
                size += len(line)
                if size >= 65536:
                    chunks.append(b"".join(buf))
                    buf, size = [], 0
            if buf:
                chunks.append(b"".join(buf))
            prepared[str(start)] = chunks
            conn.send((start, sum(map(len, chunks))))
        elif cmd == "stop":
            return False
        return True

    try:
        await obey(conn, handle)
    finally:
        await emu.stop()


@dataclass
class Emulator:
    """The parent's handle on the emulator process."""

    proc: Any
    conn: Connection
    url: str
    build_s: float
    rv: int

    @classmethod
    def start(cls, shape: Shape) -> Emulator:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=emulator_process, args=(child, shape), daemon=True)
        proc.start()
        _, url, build_s, rv = parent.recv()
        return cls(proc, parent, url, build_s, rv)

    def ask(self, *cmd: Any) -> Any:
        self.conn.send(cmd)
        return self.conn.recv()

    async def ask_async(self, *cmd: Any) -> Any:
        """Without blocking this process's event loop (the exporter reads the watch meanwhile)."""
        self.conn.send(cmd)
        return await asyncio.get_running_loop().run_in_executor(None, self.conn.recv)

    def list_s(self) -> float:
        return float(self.ask("stats")["list_s"])

    def list_stats(self, restart_max: bool = False) -> dict[str, float]:
        """LIST handler seconds, requests, bytes served and the largest response so far (since
        the last `restart_max`)."""
        return dict(self.ask("stats", restart_max))

    def stop(self) -> None:
        self.conn.send(("stop",))
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.terminate()


# -- the exporter side ---------------------------------------------------------------------------


def fresh_model() -> tuple[Registry, UnitSignalModel]:
    reg = Registry()
    model, _ = build_cluster(reg, ALLOWLIST)
    return reg, model


_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


async def fetch_pages(url: str, page_size: int = PAGE_SIZE) -> list[bytes]:
    """The LIST as raw page bodies, not decoded (the continue token is found in the metadata,
    which comes before the items): what serving and moving the pages costs."""
    pages = []
    token = None
    async with aiohttp.ClientSession() as session:
        while True:
            params = {"limit": str(page_size)}
            if token:
                params["continue"] = token
            async with session.get(url + LIST_PATH, params=params) as resp:
                resp.raise_for_status()
                body = await resp.read()
            pages.append(body)
            m = _CONTINUE.search(body, 0, 2000)
            if m is None:
                return pages
            token = m[1].decode()


def decode_pages(pages: list[bytes]) -> list[dict[str, Any]]:
    """What `KubeApi.list` does to each page body, and what the reflector collects."""
    items: list[dict[str, Any]] = []
    for page in pages:
        items.extend(orjson.loads(page)["items"])
    return items


def page_items(page: bytes) -> list[Any]:
    """A LIST page's items typed, as `KubeApi(typed=True).list` decodes them."""
    fit = decode_list(page)
    assert fit is not None
    return fit[0]


def local_sync(
    pages: list[bytes], collector: bool = False, typed: bool = True
) -> tuple[float, float, Registry, UnitSignalModel]:
    """The exporter's share of an initial sync, done as the reflector does it
    (`Reflector.list_page`): each page decoded, applied (`list_page`) and dropped, then
    `list_done`, with the cyclic collector paused throughout and everything frozen afterwards.

    `collector`: the alternative with the collector running (decoding 100k objects makes
    millions of containers that all survive; each collection walks them again)."""
    reg, model = fresh_model()
    handler = NamespaceHandler(model, None)
    release_frozen()
    decode_s = apply_s = 0.0
    now = time.time()
    listed: set[tuple[str, str]] = set()
    if not collector:
        gc.disable()
    try:
        for page in pages:
            t0 = time.perf_counter()
            items = page_items(page) if typed else orjson.loads(page)["items"]
            t1 = time.perf_counter()
            listed.update(handler.list_page(items, now))  # the keys, as the reflector takes them
            del items
            t2 = time.perf_counter()
            decode_s += t1 - t0
            apply_s += t2 - t1
        t1 = time.perf_counter()
        handler.list_done(listed, now)
    finally:
        if not collector:
            gc.enable()
            gc.freeze()
    apply_s += time.perf_counter() - t1
    return decode_s, apply_s, reg, model


def release_frozen() -> None:
    """Undo an earlier sync's gc.freeze() (the reflector's), so each case starts alike."""
    gc.unfreeze()
    gc.collect()


@dataclass
class HttpSync:
    """One exporter synced over HTTP, its source still running (watching after the sync)."""

    seconds: float
    registry: Registry
    model: UnitSignalModel
    source: KubeSource
    session: aiohttp.ClientSession
    upserts: list[int]

    async def close(self) -> None:
        await self.source.stop()
        await self.session.close()


class _CountingHandler(NamespaceHandler):
    """Counts upserts, so the watch benchmark knows when every write has arrived."""

    def __init__(self, model: UnitSignalModel, namespace: str | None, count: list[int]) -> None:
        super().__init__(model, namespace)
        self.count = count

    def upsert(self, obj: dict[str, Any], now: float) -> None:
        self.model.upsert(obj, now)
        self.count[0] += 1


async def http_sync(url: str, namespaces: list[str] | None = None,
                    typed: bool = True, watch_list: str = "off") -> HttpSync:
    """The real source: `KubeSource` (one reflector, or one per namespace), page size 500, on a
    session like `serve`'s; `typed`: decoded with msgspec as `serve` does (else orjson);
    `watch_list`: "on" syncs by the streaming list instead of paginated LISTs."""
    reg, model = fresh_model()
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    count = [0]
    source = KubeSource(KubeApi(session, from_url(url), typed=typed),
                        lambda ns: _CountingHandler(model, ns, count), KubeMetrics(reg),
                        namespaces=namespaces, page_size=PAGE_SIZE,
                        watch_list=watch_list)  # fmt: skip
    gc.collect()
    t = time.perf_counter()
    await source.start()
    while not source.synced:
        await asyncio.sleep(0.001)
    return HttpSync(time.perf_counter() - t, reg, model, source, session, count)


# -- the naive exporter --------------------------------------------------------------------------


class NaiveExporter:
    """What an exporter written with prometheus_client would do: a `Gauge` child per object and
    metric, the same metrics and labels as ours, set from each object as it arrives (a label
    value that changes removes the old child)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        base = ("namespace", "unitsignal", "workload")

        def gauge(name: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, name, (*base, *extra), registry=self.registry)

        self.plain = [(gauge(f"zaroz_unitsignal_{n}"), n) for n in (
            "generation_lag", "ready", "accepting", "allocation_pending", "status_seq",
            "spec_valid", "status_valid", "generation_stuck_invalid_spec")]  # fmt: skip
        self.lag_s = gauge("zaroz_unitsignal_generation_lag_seconds")
        self.info = gauge("zaroz_unitsignal_info", ("unit_id", "key", "agent_version"))
        self.labels = gauge("zaroz_unitsignal_labels", tuple(label_name(n) for n in ALLOWLIST))
        self.activity = gauge("zaroz_unitsignal_activity", ("activity",))
        self.draining = gauge("zaroz_unitsignal_draining", ("reason",))
        self.extra: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {}

    def apply(self, obj: dict[str, Any], now: float) -> None:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        status = obj.get("status") or {}
        labels = meta.get("labels") or {}
        key = (meta["namespace"], meta["name"])
        base = (*key, labels.get(WORKLOAD_LABEL) or key[0])
        gen = spec.get("generation")
        lag = max(0, gen - status.get("observedGeneration", 0)) if type(gen) is int else 0
        alloc = spec.get("allocation")
        alloc_id = alloc.get("id") if type(alloc) is dict else None
        spec_valid = 1 if is_valid_unit_signal_spec(spec) else 0
        full = {**dict.fromkeys(STATUS_FIELDS), **status}
        values = {
            "generation_lag": lag,
            "ready": 1 if status.get("signalledReady") else 0,
            "accepting": 1 if status.get("accepting") is True else 0,
            "allocation_pending": 1 if alloc_id and status.get("allocationAck") != alloc_id
            else 0,
            "status_seq": status.get("seq", 0),
            "spec_valid": spec_valid,
            "status_valid": 1 if not status or is_valid_unit_signal_status(full) else 0,
            "generation_stuck_invalid_spec": 1 if lag and not spec_valid else 0,
        }
        for g, n in self.plain:
            g.labels(*base).set(values[n])
        lag_s = 0.0
        if lag:
            written = [e["time"] for e in meta.get("managedFields") or ()
                       if not e.get("subresource") and "f:spec" in (e.get("fieldsV1") or {})]
            if written:
                lag_s = max(0.0, now - parse_rfc3339_ns(max(written)) / NS)
        self.lag_s.labels(*base).set(lag_s)
        activity = status.get("activity")
        draining = spec.get("draining")
        draining = draining if draining in DRAIN_REASONS else "none"
        info = (str(spec.get("unitId", "")), str(spec.get("key", "")),
                str(status.get("agentVersion", "")))  # fmt: skip
        extra = (info, tuple(str(labels.get(n, "")) for n in ALLOWLIST),
                 (activity if activity in ("idle", "busy") else "none",), (draining,))  # fmt: skip
        old = self.extra.get(key) or (None,) * 4
        gauges = (self.info, self.labels, self.activity, self.draining)
        values_extra = (1, 1, 1, 0 if draining == "none" else 1)
        for gauge, was, now_v, value in zip(gauges, old, extra, values_extra, strict=True):
            if was is not None and was != now_v:
                gauge.remove(*base, *was)
            gauge.labels(*base, *now_v).set(value)
        self.extra[key] = extra

    def scrape(self) -> bytes:
        return generate_latest(self.registry)


# -- memory children (one side alone in a fresh process) -----------------------------------------


def _rss_mib() -> float:
    return proc_status_kib("VmRSS") / 1024


def _after_sync(out: dict[str, float], scrape: Callable[[], bytes] | None) -> dict[str, float]:
    """RSS once the sync's garbage is gone, the sync's peak, then the same around one scrape."""
    gc.collect()
    out["synced"] = _rss_mib()
    out["hwm_sync"] = proc_status_kib("VmHWM") / 1024
    if scrape is not None:
        reset_peak_rss()
        body = scrape()
        out["scrape_bytes"] = len(body)
        del body
        gc.collect()
        out["scraped"] = _rss_mib()
        out["hwm_scrape"] = proc_status_kib("VmHWM") / 1024
    return out


def child_ours_http(url: str, typed: bool = True) -> dict[str, float]:
    """The exporter as deployed (without the event pipeline): KubeSource over HTTP."""

    async def run() -> dict[str, float]:
        gc.collect()
        out = {"base": _rss_mib()}
        sync = await http_sync(url, typed=typed)
        await sync.close()
        out["objects"] = len(sync.model.objects)
        _after_sync(out, None)
        # the scrape as served: MetricsServer on loopback, read by a client that keeps nothing
        runner, base = await start_site(MetricsServer(sync.registry).app, "127.0.0.1:0")
        try:
            reset_peak_rss()
            size = 0
            async with aiohttp.ClientSession() as session, session.get(f"{base}/metrics") as r:
                async for piece in r.content.iter_chunked(1 << 16):
                    size += len(piece)
            out["scrape_bytes"] = size
            gc.collect()
            out["scraped"] = _rss_mib()
            out["hwm_scrape"] = proc_status_kib("VmHWM") / 1024
        finally:
            await runner.cleanup()
        return out

    return asyncio.run(run())


def serve_memory(url: str, *extra: str, timeout: float = 600.0) -> dict[str, float]:
    """The exporter as operators run it: `zaroz-exporter serve` (a process of its own, importing
    only what serve imports) watching the emulator's UnitSignals; its RSS from /proc when
    /healthz first answers (the sync may have begun), once /readyz says synced, and around one
    scrape of /metrics read by a client that keeps nothing."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-c", "from exporter.cli import main; main()", "serve",
           "--kube", "on", "--kube-api-url", url, "--listen", f"127.0.0.1:{port}",
           "--unitsignal-labels-allowlist", ",".join(ALLOWLIST), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=child_env())
    out: dict[str, float] = {}

    def answers(path: str) -> bool:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        deadline = time.monotonic() + timeout
        t = time.perf_counter()
        while not answers("/readyz"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not get ready (exit {proc.poll()})")
            if "base" not in out and answers("/healthz"):
                out["base"] = proc_status_kib("VmRSS", proc.pid) / 1024
            time.sleep(0.05)
        out["ready_s"] = time.perf_counter() - t
        time.sleep(1.0)  # the sync's last page applied and freed
        out["synced"] = proc_status_kib("VmRSS", proc.pid) / 1024
        out["hwm_sync"] = proc_status_kib("VmHWM", proc.pid) / 1024
        reset_peak_rss(proc.pid)
        size = 0
        with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
            while piece := r.read(1 << 16):
                size += len(piece)
        out["scrape_bytes"] = size
        out["scraped"] = proc_status_kib("VmRSS", proc.pid) / 1024
        out["hwm_scrape"] = proc_status_kib("VmHWM", proc.pid) / 1024
        # Text and protobuf scrapers taking turns (Prometheus replicas, one with native
        # histograms on): what the process holds once both forms are kept.
        for accept in (PROTOBUF_ACCEPT, None, PROTOBUF_ACCEPT, None):
            req = urllib.request.Request(base + "/metrics",
                                         headers={"Accept": accept} if accept else {})
            with urllib.request.urlopen(req, timeout=60) as r:
                while r.read(1 << 16):
                    pass
        time.sleep(0.5)
        out["turns"] = proc_status_kib("VmRSS", proc.pid) / 1024
        out["hwm_turns"] = proc_status_kib("VmHWM", proc.pid) / 1024
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return out


def _read_pages(pages_file: Path, limit: int | None = None) -> list[bytes]:
    pages = pages_file.read_bytes().split(b"\n")
    return pages[: -(-limit // PAGE_SIZE)] if limit else pages


def _fed(pages_file: Path, apply: Callable[[dict[str, Any], float], object]) -> dict[str, float]:
    """Each page decoded, every object applied, and the page dropped; RSS before (`base`)."""
    gc.collect()
    out = {"base": _rss_mib()}
    pages = _read_pages(pages_file)
    now = time.time()
    for i, page in enumerate(pages):
        for obj in orjson.loads(page)["items"]:
            apply(obj, now)
        pages[i] = b""
    return out


def child_ours_paged(pages_file: Path) -> dict[str, float]:
    """The alternative: each page upserted as it arrives and dropped (into a fresh model this
    is exactly a replace), instead of collecting every page's objects first."""
    reg, model = fresh_model()
    out = _fed(pages_file, model.upsert)
    out["objects"] = len(model.objects)
    return _after_sync(out, lambda: b"".join(render(reg)))


def child_ours_traced(pages_file: Path, limit: int) -> dict[str, Any]:
    """tracemalloc of what model and registry keep after syncing the first `limit` objects
    (decoding traced too: the model keeps strings of the decoded objects), by file. Tracing
    slows allocation several times, hence a sample; RSS is meaningless here."""
    pages = _read_pages(pages_file, limit)
    reg, model = fresh_model()
    tracemalloc.start()
    items = decode_pages(pages)
    model.replace(items, time.time())
    del items
    gc.collect()
    held, peak = tracemalloc.get_traced_memory()
    snap = tracemalloc.take_snapshot()
    body_size = len(b"".join(render(reg)))  # the scrape's output is not held afterwards
    gc.collect()
    held_scraped = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    root = str(Path(__file__).resolve().parent.parent) + "/"
    by_file = [(s.traceback[0].filename.replace(root, ""), s.size)
               for s in snap.statistics("filename")[:5]]  # fmt: skip
    return {"held": held, "peak": peak, "held_scraped": held_scraped, "by_file": by_file,
            "objects": len(model.objects), "body": body_size}  # fmt: skip


def child_prom_bytes(pages_file: Path) -> dict[str, float]:
    """The naive exporter alone, fed page by page (it keeps no objects)."""
    naive = NaiveExporter()
    out = _fed(pages_file, naive.apply)
    out["objects"] = len(naive.extra)
    return _after_sync(out, None)


def start_child(which: str, arg: str, limit: int = 0) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.cluster", "--child", which, arg, "--objects", str(limit)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=child_env())


def child_result(which: str, proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"memory child {which} failed ({proc.returncode})")
    return json.loads(out)  # type: ignore[no-any-return]


def run_child(which: str, arg: str | None, limit: int) -> dict[str, Any]:
    if which == "ours-http":
        res: dict[str, Any] = child_ours_http(str(arg))
    elif which == "ours-http-untyped":
        res = child_ours_http(str(arg), typed=False)
    elif which == "ours-paged":
        res = child_ours_paged(Path(str(arg)))
    elif which == "ours-traced":
        res = child_ours_traced(Path(str(arg)), limit)
    else:
        res = child_prom_bytes(Path(str(arg)))
    res["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


# -- measuring -----------------------------------------------------------------------------------


def top_stats(prof: cProfile.Profile, n: int) -> str:
    """cProfile's top `n` by own time (where the time goes, not who calls it)."""
    s = io.StringIO()
    pstats.Stats(prof, stream=s).strip_dirs().sort_stats("tottime").print_stats(n)
    text = s.getvalue()
    start = text.find("   ncalls")
    return text[start:].rstrip() if start >= 0 else text.rstrip()


def profiled(title: str, fn: Callable[[], object]) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    print(f"\n-- profile: {title} (cProfile, top 15 by own time)")
    print(top_stats(prof, 15), flush=True)


@dataclass
class Verdicts:
    """The summary table; `missed` names the hot paths to profile."""

    rows: list[list[str]] = field(default_factory=lambda: [["figure", "value", "target",
                                                            "verdict"]])
    missed: set[str] = field(default_factory=set)

    def add(self, tag: str, name: str, value: str, target: str, ok: bool | None) -> None:
        verdict = "info" if ok is None else ("PASS" if ok else "MISS")
        if ok is False:
            self.missed.add(tag)
        self.rows.append([name, value, target, verdict])


def apply_lines(model: UnitSignalModel, lines: list[bytes]) -> None:
    """The in-process watch path: decode a line, upsert its object, the clock read per event."""
    loads, upsert, clock = orjson.loads, model.upsert, time.time
    for line in lines:
        upsert(loads(line)["object"], clock())


def apply_reflector(reflector: Reflector, lines: list[bytes]) -> None:
    """The reflector's own path for each line of a watch stream (checks, metrics, keys, rv)."""
    apply = reflector._apply
    for line in lines:
        apply(_decode_event(line))


def apply_lines_typed(model: UnitSignalModel, lines: list[bytes]) -> None:
    """The same, each line decoded typed (msgspec) as `KubeApi(typed=True)` does."""
    decode, upsert, clock = decode_event, model.upsert, time.time
    for line in lines:
        upsert(decode(line)[1], clock())  # type: ignore[index]


def apply_reflector_typed(reflector: Reflector, lines: list[bytes]) -> None:
    apply, decode = reflector._apply, _decode_typed_event
    for line in lines:
        apply(decode(line))


def handler_typed(handler: NamespaceHandler, lines: list[bytes]) -> None:
    """A shard's handler alone: typed decode, ownership from metadata, the drop."""
    decode, upsert, clock = decode_event, handler.upsert, time.time
    for line in lines:
        upsert(decode(line)[1], clock())  # type: ignore[index]


class _TypeOnly(msgspec.Struct, gc=False):
    type: str


def type_only(lines: list[bytes]) -> None:
    """The least any decoder that parses the line does: msgspec validating all of it and
    keeping nothing but the event's type."""
    decode = msgspec.json.Decoder(_TypeOnly).decode
    for line in lines:
        decode(line)


def typed_only(lines: list[bytes]) -> None:
    decode = decode_event
    for line in lines:
        decode(line)


def loads_only(lines: list[bytes]) -> None:
    loads = orjson.loads
    for line in lines:
        loads(line)


def timed_call(fn: Callable[[], object]) -> float:
    gc.collect()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


async def interleaved_async(
    cases: dict[str, Callable[[], Awaitable[float]]], repeat: int
) -> dict[str, list[float]]:
    """`bench._common.interleaved` for cases that run on the event loop."""
    names = list(cases)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeat):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(await cases[name]())
    return out


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--objects", type=int, default=100_000, help="UnitSignals")
    ap.add_argument("--namespaces", type=int, default=20)
    ap.add_argument("--workloads", type=int, default=50)
    ap.add_argument("--user-data", type=int, default=64, help="bytes of spec.userData")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sync-repeat", type=int, default=2, help="interleaved initial-sync rounds")
    ap.add_argument("--per-namespace", action="store_true",
                    help="also sync with one reflector per namespace (+~15 s a round)")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved watch rounds")
    ap.add_argument("--events", type=int, default=30_000, help="watch lines per case and round")
    ap.add_argument("--http-events", type=int, default=10_000,
                    help="writes per end-to-end watch round (0: skip)")
    ap.add_argument("--stream-events", type=int, default=50_000,
                    help="lines per pre-rendered watch round (0: skip)")
    ap.add_argument("--scrape-repeat", type=int, default=2, help="interleaved scrape rounds")
    ap.add_argument("--http-repeat", type=int, default=3, help="MetricsServer rounds (0: skip)")
    ap.add_argument("--traced-objects", type=int, default=10_000,
                    help="objects in the tracemalloc sample")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory children")
    ap.add_argument("--profile", action="store_true",
                    help="profile every hot path, not only those that missed their target")
    ap.add_argument("--child", choices=("ours-http", "ours-http-untyped", "ours-paged",
                                        "ours-traced", "prom-bytes"),
                    help=argparse.SUPPRESS)
    ap.add_argument("child_arg", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.child, args.child_arg, args.objects)))
        return
    asyncio.run(run(args))


async def run(args: argparse.Namespace) -> None:
    header("cluster")
    t_start = time.perf_counter()
    shape = Shape(args.objects, args.namespaces, args.workloads, args.user_data, args.seed)
    emu = Emulator.start(shape)
    bench = ClusterBench(args, shape, emu)
    try:
        await bench.prepare()
        await bench.sync()
        bench.memory()
        await bench.watch_http()
        await bench.watch_stream()
        bench.watch()
        bench.foreign()
        bench.scrape()
        await bench.scrape_http()
        bench.profiles()
    finally:
        if bench.kept is not None:
            await bench.kept.close()
        emu.stop()
    print(f"\n== summary ({shape.objects:,} UnitSignals of {bench.object_size:,.0f} B, "
          f"{shape.namespaces} namespaces, {shape.workloads} workloads)")
    print(table(bench.verdicts.rows))
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")


class ClusterBench:
    """The sections of one run, in order, sharing the pages, the event source and one model."""

    def __init__(self, args: argparse.Namespace, shape: Shape, emu: Emulator) -> None:
        self.args = args
        self.shape = shape
        self.emu = emu
        self.n = shape.objects
        self.changed = max(1, int(shape.objects * CHANGED))
        self.verdicts = Verdicts()
        self.pages: list[bytes] = []
        self.object_size = 0.0
        self.source = EventSource([], emu.rv, args.seed)
        self.mem: dict[str, dict[str, Any]] = {}
        self.first_scrape: list[float] = []
        self.emu_profile = ""  # the emulator's LIST handler while the pages were fetched
        self.registry, self.model = fresh_model()  # the one kept: watch rounds, then scrapes
        self.kept: HttpSync | None = None  # the last HTTP sync, for the end-to-end watch
        self.e2e = ""  # events/s of the end-to-end watch

    async def prepare(self) -> None:
        """The pages, once (the emulator's LIST handler profiled meanwhile); the event source's
        objects; the memory children (before any timing, since they use both cores)."""
        print(f"emulator (own process): {self.n:,} UnitSignals in {self.shape.namespaces} "
              f"namespaces, {self.shape.workloads} workloads, built in {self.emu.build_s:.1f} s "
              "through its write API", flush=True)
        self.emu.ask("profile", True)
        t = time.perf_counter()
        self.pages = pages = await fetch_pages(self.emu.url)
        fetch_s = time.perf_counter() - t
        self.emu_profile = self.emu.ask("profile", False)
        items = decode_pages(pages)
        if len(items) != self.n:
            raise RuntimeError(f"the list returned {len(items)} of {self.n} objects")
        self.source.objects = [orjson.dumps(o) for o in items]
        sizes = sorted(map(len, self.source.objects))
        self.object_size = sum(sizes) / len(sizes)
        sample = items[:: max(1, len(items) // 1000)]
        mf = sum(len(orjson.dumps(o["metadata"]["managedFields"])) for o in sample) / len(sample)
        ud = sum(len(orjson.dumps(o["spec"]["userData"])) for o in sample) / len(sample)
        del items, sample
        print(f"LIST: {len(pages)} pages of {PAGE_SIZE}, {sum(map(len, pages)) / 2**20:,.1f} "
              f"MiB, fetched without decoding in {fetch_s:.1f} s (the emulator profiling every "
              f"10th page); object JSON mean {self.object_size:,.0f} B (min {sizes[0]:,}, max "
              f"{sizes[-1]:,}), of which metadata.managedFields {mf:,.0f} B, spec.userData "
              f"{ud:,.0f} B", flush=True)
        if self.args.no_memory:
            return
        OUT.mkdir(parents=True, exist_ok=True)
        pages_file = OUT / f"cluster-pages-{self.n}.jsonl"
        pages_file.write_bytes(b"\n".join(pages))
        t = time.perf_counter()
        try:
            # the emulator and ours-http share about one core; tracemalloc's child runs last,
            # when the others have exited, so peak memory stays at a few GB
            for batch in (("ours-http", "prom-bytes", "ours-paged"),
                          ("ours-http-untyped", "ours-traced")):
                procs = {w: start_child(w, self.emu.url if w.startswith("ours-http")
                                        else str(pages_file),
                                        self.args.traced_objects) for w in batch}  # fmt: skip
                for w, p in procs.items():
                    self.mem[w] = child_result(w, p)
            # alone with the emulator, as the other children are
            self.mem["serve"] = serve_memory(self.emu.url)
            self.mem["serve-all"] = serve_memory(self.emu.url, "--metric-opt-in-list",
                                                 "zaroz_unitsignal_status_seq")
        finally:
            pages_file.unlink()
        print(f"memory children done in {time.perf_counter() - t:.0f} s", flush=True)

    # -- 1. initial sync -----------------------------------------------------------------------

    async def _drop_kept(self) -> None:
        if self.kept is not None:
            await self.kept.close()
            self.kept = None
        release_frozen()

    async def sync(self) -> None:
        """Over HTTP against the exporter's share alone (and that share with the collector
        paused), interleaved. Only one exporter is alive at a time: another process's model
        would make every full collection of this one slower."""
        emu, pages = self.emu, self.pages
        http1 = "KubeSource over HTTP, 1 reflector, msgspec typed, paginated LISTs"
        http_wl = "  the same by the streaming list (watch-list, serve's default)"
        http_u = "  paginated, orjson untyped (alternative: before)"
        httpn = f"KubeSource over HTTP, {self.shape.namespaces} reflectors (one per namespace)"
        ours = "ours: decode + apply page by page, typed, collector paused (as the reflector)"
        ours_gc = "  ours, orjson untyped (alternative: before)"
        local: dict[str, list[float]] = {"decode": [], "apply": [], "decode_gc": [],
                                         "apply_gc": []}  # fmt: skip
        emu_list: dict[str, list[float]] = {http1: [], http_wl: [], http_u: [], httpn: []}
        served: dict[str, dict[str, float]] = {}  # LIST responses of a case's last round

        async def over_http(name: str, namespaces: list[str] | None, typed: bool = True,
                            watch_list: str = "off") -> float:
            await self._drop_kept()
            before = emu.list_stats(restart_max=True)
            sync = await http_sync(emu.url, namespaces, typed, watch_list)
            after = emu.list_stats()
            emu_list[name].append(after["list_s"] - before["list_s"])
            served[name] = {"lists": after["lists"] - before["lists"],
                            "bytes": after["list_bytes"] - before["list_bytes"],
                            "max": after["list_max"]}
            modes = {r.list_mode for r in sync.source.reflectors}
            want = "watch-list" if watch_list == "on" else "paginated"
            if modes != {want}:
                raise RuntimeError(f"{name}: synced by {modes}, not {want}")
            if namespaces is None and typed and watch_list == "off":
                self.kept = sync  # the end-to-end watch uses the last one
            else:
                await sync.close()
            return sync.seconds

        async def ours_case(untyped: bool) -> float:
            await self._drop_kept()
            self.registry, self.model = fresh_model()
            decode_s, apply_s, reg, model = local_sync(pages, typed=not untyped)
            local["decode_gc" if untyped else "decode"].append(decode_s)
            local["apply_gc" if untyped else "apply"].append(apply_s)
            if not untyped:
                self.first_scrape.append(timed_call(lambda: b"".join(render(reg))))
            self.registry, self.model = reg, model
            return decode_s + apply_s

        cases: dict[str, Callable[[], Awaitable[float]]] = {
            http1: lambda: over_http(http1, None),
            http_wl: lambda: over_http(http_wl, None, watch_list="on"),
            http_u: lambda: over_http(http_u, None, typed=False),
            ours: lambda: ours_case(False),
            ours_gc: lambda: ours_case(True),
        }
        if self.args.per_namespace:
            cases[httpn] = lambda: over_http(httpn, self.shape.namespace_names())
        times = await interleaved_async(cases, self.args.sync_repeat)
        print(f"\n1. initial sync of {self.n:,} objects, page size {PAGE_SIZE}, best of "
              f"{self.args.sync_repeat}, interleaved")
        rows = [["case", "time best (median, max)", "emulator LIST handler (best)",
                 "LIST responses served (largest, total)"]]
        for name, ts in times.items():
            lists = served.get(name)
            rows.append([name, spread(ts), ms(min(emu_list[name])) if emu_list.get(name) else "",
                         f"{lists['lists']:,.0f} ({mib(lists['max'])}, {mib(lists['bytes'])})"
                         if lists else ""])
            if name in (ours, ours_gc):
                d, a = ("decode", "apply") if name == ours else ("decode_gc", "apply_gc")
                rows.append(["    of which the decode of the pages", spread(local[d]), "", ""])
                rows.append(["    of which list_page + list_done (model, metrics)",
                             spread(local[a]), "", ""])
        print(table(rows))
        best_http, best_ours, best_emu = min(times[http1]), min(times[ours]), min(emu_list[http1])
        rest = best_http - best_ours
        untyped = min(times[ours_gc]) - best_ours
        # The emulator has its own process and the reflector asks for each page before it
        # applies the one it has, so the emulator's time runs beside ours, not after it.
        print(f"best HTTP sync = ours: decode and apply {ms(best_ours)} "
              f"({best_ours / best_http:.0%}) + the rest (our side of the sockets and aiohttp, "
              f"the reflector, waiting for pages) {ms(rest)} ({rest / best_http:.0%}); the "
              f"emulator's LIST handler, {ms(best_emu)}, ran meanwhile in its own process; "
              f"decoding untyped with orjson would add {ms(untyped)} (decode "
              f"{ms(min(local['decode']))} typed, {ms(min(local['decode_gc']))} orjson)",
              flush=True)
        target = f"<= {TARGET_SYNC_S:g} s"
        v = self.verdicts
        v.add("sync-http", "1a. sync over HTTP, KubeSource <- emulator", ms(best_http), target,
              best_http <= TARGET_SYNC_S)
        best_wl = min(times[http_wl])
        v.add("sync-http", "    the same by the streaming list (watch-list)", ms(best_wl),
              target, best_wl <= TARGET_SYNC_S)
        v.add("sync-http", "    paginated, orjson untyped (alternative)", ms(min(times[http_u])),
              target, None)
        if self.args.per_namespace:
            v.add("sync-http", "    one reflector per namespace", ms(min(times[httpn])),
                  target, min(times[httpn]) <= TARGET_SYNC_S)
        v.add("sync-ours", "1b. ours: decode + apply, as the reflector", ms(best_ours), target,
              best_ours <= TARGET_SYNC_S)
        v.add("sync-ours", "    the same, orjson untyped (alternative)",
              ms(min(times[ours_gc])), target, None)

    # -- 2. memory -----------------------------------------------------------------------------

    def memory(self) -> None:
        if not self.mem:
            return
        mem, v = self.mem, self.verdicts
        print("\n2. memory, each alone in its own process, MiB (emulator in its own process)")
        rows = [["process", "RSS at start", "after sync", "peak of sync", "after a scrape",
                 "peak of scrape", "after text + protobuf turns"]]
        labels = {"serve": "zaroz-exporter serve, its own process (as deployed)",
                  "serve-all": "the same, with the opt-in status_seq (every family)",
                  "ours-http": "ours: KubeSource over HTTP, typed, in a bench process",
                  "ours-http-untyped": "the same, orjson untyped (alternative: before)",
                  "ours-paged": "ours fed page by page (alternative, no HTTP)",
                  "prom-bytes": "naive prometheus_client, fed page by page"}  # fmt: skip
        for w, label in labels.items():
            r = mem[w]
            rows.append([label, f"{r.get('base', 0):,.0f}", f"{r['synced']:,.0f}",
                         f"{r['hwm_sync']:,.0f}", f"{r.get('scraped', 0):,.0f}",
                         f"{r.get('hwm_scrape', 0):,.0f}",
                         f"{r['turns']:,.0f}" if "turns" in r else "(not run)"])
        rows[-1][4:6] = ["(not run)", "(not run)"]
        print(table(rows))
        tr = mem["ours-traced"]
        k = self.n / tr["objects"]
        print(f"tracemalloc of a {tr['objects']:,}-object sync: model + registry hold "
              f"{tr['held'] / tr['objects']:,.0f} B per object after the sync (x{self.n:,} = "
              f"{mib(tr['held'] * k)}), {tr['held_scraped'] / tr['objects']:,.0f} B after a "
              f"scrape (x{self.n:,} = {mib(tr['held_scraped'] * k)}); peak "
              f"during decode + replace {tr['peak'] / tr['objects']:,.0f} B per object")
        print("held after the sync, by file, per object: " + ", ".join(
            f"{f.replace('bench/cluster.py', 'decoded strings kept')} "
            f"{s / tr['objects']:,.0f} B" for f, s in tr["by_file"]), flush=True)
        s = mem["serve"]
        print(f"zaroz-exporter serve, its defaults (`zaroz_unitsignal_status_seq` is opt-in: "
              f"not exported): ready (synced) {s['ready_s']:.1f} s after its start; RSS at "
              f"start is read at its first /healthz (the sync may have begun); a scrape of "
              f"{s['scrape_bytes']:,.0f} B ({mem['serve-all']['scrape_bytes']:,.0f} B with "
              f"status_seq; the bench processes export every family)", flush=True)
        r, p, a = mem["ours-http"], mem["prom-bytes"], mem["ours-paged"]
        u = mem["ours-http-untyped"]
        target = f"<= {TARGET_RSS_MIB:g} MiB"
        v.add("rss", "2. RSS after sync, zaroz-exporter serve", f"{s['synced']:,.0f} MiB",
              target, s["synced"] <= TARGET_RSS_MIB)
        v.add("rss", "   RSS after sync + one scrape", f"{s['scraped']:,.0f} MiB", target,
              s["scraped"] <= TARGET_RSS_MIB)
        peak = f"<= {TARGET_PEAK_MIB:g} MiB"
        v.add("rss", "   peak RSS during a scrape", f"{s['hwm_scrape']:,.0f} MiB", peak,
              s["hwm_scrape"] <= TARGET_PEAK_MIB)
        v.add("rss", "   RSS after text and protobuf scrapers took turns",
              f"{s['turns']:,.0f} MiB (peak {s['hwm_turns']:,.0f})",
              f"<= {TARGET_TURNS_MIB:g} MiB",
              s["turns"] <= TARGET_TURNS_MIB)
        sa = mem["serve-all"]
        v.add("rss", "   serve with every family (status_seq opted in)",
              f"{sa['synced']:,.0f} / {sa['hwm_scrape']:,.0f} MiB", "", None)
        v.add("rss", "   in a bench process, typed, after sync", f"{r['synced']:,.0f} MiB",
              target, None)
        v.add("rss", "   the same, orjson untyped (alternative)", f"{u['synced']:,.0f} MiB",
              target, None)
        v.add("rss", "   in a bench process, peak of a scrape", f"{r['hwm_scrape']:,.0f} MiB",
              peak, None)
        v.add("rss", "   the same, orjson untyped (alternative)", f"{u['hwm_scrape']:,.0f} MiB",
              peak, None)
        v.add("rss", "   peak RSS during the sync", f"{r['hwm_sync']:,.0f} MiB", "", None)
        v.add("rss", "   page by page (alternative), after sync", f"{a['synced']:,.0f} MiB",
              target, None)
        v.add("rss", "   naive prometheus_client, after sync", f"{p['synced']:,.0f} MiB", "",
              None)

    # -- 3. watch events -----------------------------------------------------------------------

    async def watch_http(self) -> None:
        """Writes made in the emulator, read by the synced KubeSource from its WATCH."""
        count = self.args.http_events
        if count <= 0:
            return
        if self.kept is None:
            self.kept = await http_sync(self.emu.url)
        sync = self.kept
        try:
            watches = sync.registry["zaroz_kube_requests_total"].labels("*", "watch", "200")
            while watches.value < 1:  # type: ignore[union-attr]
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            rounds: list[tuple[float, float]] = []
            for _ in range(self.args.repeat):
                gc.collect()
                want = sync.upserts[0] + count
                t = time.perf_counter()
                write_s, _ = await self.emu.ask_async("write", count)
                while sync.upserts[0] < want:
                    await asyncio.sleep(0.001)
                rounds.append((time.perf_counter() - t, write_s))
        finally:
            await self._drop_kept()
        best = min(rounds)
        med = sorted(x[0] for x in rounds)[len(rounds) // 2]
        print(f"\n3. watch, end to end: {count:,} writes made in the emulator at once, until the "
              f"exporter applied all from its WATCH, best of {self.args.repeat}")
        rows = [["over HTTP", "time best (median)", "events/s", "emulator write API alone"]]
        rows.append(["emulator -> WATCH -> KubeSource -> model", f"{ms(best[0])} ({ms(med)})",
                     rate(count, best[0]), ms(best[1])])
        print(table(rows), flush=True)
        self.e2e = f"{count / best[0]:,.0f}/s"

    def watch(self) -> None:
        """Six ways through MODIFIED lines into the one synced model, interleaved; each case
        takes the next batch of one continuing history (each floor reads its upsert's batch)."""
        events = self.args.events
        reflectors = []
        for _ in range(2):
            r = Reflector(None, NamespaceHandler(self.model, None),  # type: ignore[arg-type]
                          KubeMetrics(self.registry))
            r.resource_version = str(self.source.rv)
            r.keys = set(self.model.objects)  # as a synced reflector holds them
            reflectors.append(r)
        floor, tfloor = "orjson.loads only (floor, before)", "msgspec typed decode only (floor)"
        tup, up = "typed + model.upsert", "loads + model.upsert (before)"
        trefl, refl = ("typed + Reflector._apply (serve)",
                       "_decode_event + Reflector._apply (before)")  # fmt: skip
        times: dict[str, list[float]] = {tfloor: [], tup: [], trefl: [], floor: [], up: [],
                                         refl: []}  # fmt: skip
        spec_writes, sizes = 0, 0
        for r in range(self.args.repeat):
            lines = {}
            for w in (tup, trefl, up, refl):
                lines[w] = self.source.lines(events)
                spec_writes += self.source.spec_writes
            lines[floor], lines[tfloor] = lines[up], lines[tup]
            sizes += sum(map(len, lines[up]))
            cases: dict[str, Callable[[], object]] = {
                tfloor: lambda ls=lines[tfloor]: typed_only(ls),
                tup: lambda ls=lines[tup]: apply_lines_typed(self.model, ls),
                trefl: lambda ls=lines[trefl]: apply_reflector_typed(reflectors[0], ls),
                floor: lambda ls=lines[floor]: loads_only(ls),
                up: lambda ls=lines[up]: apply_lines(self.model, ls),
                refl: lambda ls=lines[refl]: apply_reflector(reflectors[1], ls),
            }
            names = list(cases)
            k = r % len(names)
            for w in names[k:] + names[:k]:
                times[w].append(timed_call(cases[w]))
        n_lines = events * self.args.repeat
        print(f"\n3. watch, in-process: {events:,} MODIFIED lines per case and round (mean "
              f"{sizes / n_lines:,.0f} B; {spec_writes / (4 * n_lines):.1%} spec writes, the "
              f"rest status), best of {self.args.repeat}, interleaved")
        rows = [["in-process", "time best (median, max)", "events/s (best)", "µs an event"]]
        for w, ts in times.items():
            rows.append([w, spread(ts), rate(events, min(ts)), f"{min(ts) / events * 1e6:.2f}"])
        print(table(rows), flush=True)
        target, v = f">= {TARGET_EVENTS_S:,.0f}/s", self.verdicts
        for name, w, judged in (
                ("3. watch events through Reflector._apply, typed", trefl, True),
                ("   the same, orjson untyped (alternative)", refl, False),
                ("   typed + model.upsert", tup, False),
                ("   loads + model.upsert (alternative)", up, False),
                ("   msgspec typed decode alone (floor)", tfloor, False),
                ("   orjson.loads alone (floor, before)", floor, False)):
            ev = events / min(times[w])
            v.add("events", name, f"{ev:,.0f}/s", target,
                  ev >= TARGET_EVENTS_S if judged else None)
        if self.e2e:
            v.add("events-http", "   end to end over the emulator's write API + WATCH",
                  self.e2e, "(report)", None)

    def foreign(self) -> None:
        """What another shard's object costs a shard of 4: watch lines of objects whose
        workloads shard 0 does not own, into shard 0's handler (an empty model: it owns none
        of them), typed against the untyped decode and drop of before."""
        events = self.args.events
        shard = Shard(0, 4)

        def workload(raw: bytes) -> str:
            meta = orjson.loads(raw)["metadata"]
            return str(meta["labels"].get(WORKLOAD_LABEL) or meta["namespace"])

        foreign = [raw for raw in self.source.objects if not shard.owns(workload(raw))]
        src = EventSource(foreign, self.source.rv, self.args.seed + 9)
        reg, model = fresh_model()
        metrics = KubeMetrics(reg)
        keys = {(m["namespace"], m["name"]) for m in
                (orjson.loads(raw)["metadata"] for raw in foreign)}
        hs, rs = [], []
        for _ in range(3):
            h = NamespaceHandler(model, None, shard.owns, metrics.decoded("*"))
            r = Reflector(None, h, metrics)  # type: ignore[arg-type]
            r.resource_version, r.keys = str(src.rv), set(keys)  # a live shard keys them all
            hs.append(h)
            rs.append(r)
        tfloor, th, tr, ur = ("msgspec typed decode alone (floor)",
                              "typed decode + handler (ownership from metadata, drop)",
                              "typed + Reflector._apply (serve: + metrics, keys, rv)",
                              "orjson + Reflector._apply (before: full decode + drop)")
        parse = "msgspec parsing the line, keeping only its type (floor of any parse)"
        times: dict[str, list[float]] = {parse: [], tfloor: [], th: [], tr: [], ur: []}
        for rnd in range(self.args.repeat):
            lines = {w: src.lines(events) for w in (th, tr, ur)}
            lines[tfloor] = lines[parse] = lines[th]
            cases: dict[str, Callable[[], object]] = {
                parse: lambda ls=lines[parse]: type_only(ls),
                tfloor: lambda ls=lines[tfloor]: typed_only(ls),
                th: lambda ls=lines[th]: handler_typed(hs[0], ls),
                tr: lambda ls=lines[tr]: apply_reflector_typed(rs[1], ls),
                ur: lambda ls=lines[ur]: apply_reflector(rs[2], ls),
            }
            names = list(cases)
            k = rnd % len(names)
            for w in names[k:] + names[:k]:
                times[w].append(timed_call(cases[w]))
        if model.objects:
            raise RuntimeError("a foreign object reached shard 0's model")
        skipped = reg.counter("zaroz_kube_objects_decoded_total").labels("*", "metadata").value
        print(f"\n3c. foreign objects on shard 0 of 4: {len(foreign):,} of {self.n:,} objects "
              f"are other shards'; {events:,} MODIFIED lines of them per case and round, best of "
              f"{self.args.repeat}, interleaved; none reached the model, "
              f"{skipped:,.0f} counted as decoded to metadata only")
        rows = [["a foreign object", "time best (median, max)", "µs an object"]]
        for w, ts in times.items():
            rows.append([w, spread(ts), f"{min(ts) / events * 1e6:.2f}"])
        print(table(rows), flush=True)
        target, v = f"<= {TARGET_FOREIGN_US:g} µs", self.verdicts
        for name, w, judged in (("3c. foreign object, shard of 4, through the reflector", tr, True),
                                ("    its handler alone (decode, ownership, drop)", th, False),
                                ("    orjson full decode + drop (alternative: before)", ur, False),
                                ("    msgspec typed decode alone (floor)", tfloor, False),
                                ("    the line parsed, only its type kept (floor of any parse)",
                                 parse, False)):
            us = min(times[w]) / events * 1e6
            v.add("foreign", name, f"{us:.2f} µs", target,
                  us <= TARGET_FOREIGN_US if judged else None)

    async def watch_stream(self) -> None:
        """End to end from a pre-rendered stream: a fresh synced exporter's reflector opens a
        WATCH that the emulator answers with `--stream-events` lines made before the clock
        starts (64 KiB chunks), so the HTTP path and ours are measured, not the emulator's
        write API. Typed (serve) and untyped rounds interleaved, each its own batch."""
        n = self.args.stream_events
        if n <= 0:
            return
        sync = await http_sync(self.emu.url)
        await sync.source.stop()
        times: dict[bool, list[float]] = {True: [], False: []}
        size = 0
        try:
            for rnd in range(2 * self.args.repeat):
                typed = rnd % 2 == 0 if (rnd // 2) % 2 == 0 else rnd % 2 == 1
                start_rv, size = await self.emu.ask_async("prerender", n)
                count = [0]
                api = KubeApi(sync.session, from_url(self.emu.url), typed=typed)
                r = Reflector(api, _CountingHandler(sync.model, None, count),
                              KubeMetrics(sync.registry), watch_timeout=600,
                              min_watch_duration=0.0)
                r.resource_version, r.keys = str(start_rv), set(sync.model.objects)
                gc.collect()
                t = time.perf_counter()
                await r.watch_once()
                elapsed = time.perf_counter() - t
                failed = {k: s.value for k, s in  # type: ignore[union-attr]
                          sync.registry["zaroz_kube_failures_total"].series.items() if s.value}
                if count[0] != n or failed:
                    raise RuntimeError(f"pre-rendered watch: {count[0]} of {n} applied, "
                                       f"failures {failed}")
                times[typed].append(elapsed)
        finally:
            await sync.close()
            release_frozen()
        typed_s, untyped_s = min(times[True]), min(times[False])
        print(f"\n3b. watch, end to end from a pre-rendered stream: {n:,} MODIFIED lines "
              f"({size / 2**20:,.1f} MiB, made before the clock starts) over one WATCH into a "
              f"synced exporter, best of {self.args.repeat}, interleaved")
        rows = [["over HTTP", "time best (median, max)", "events/s (best)"]]
        rows.append(["pre-rendered WATCH -> Reflector, typed (serve)", spread(times[True]),
                     rate(n, typed_s)])
        rows.append(["the same, orjson untyped (alternative)", spread(times[False]),
                     rate(n, untyped_s)])
        print(table(rows), flush=True)
        target = f">= {TARGET_STREAM_S:,.0f}/s"
        self.verdicts.add("events-http", "3b. watch end to end, pre-rendered stream, typed",
                          rate(n, typed_s), target, n / typed_s >= TARGET_STREAM_S)
        self.verdicts.add("events-http", "    the same, orjson untyped (alternative)",
                          rate(n, untyped_s), target, None)

    # -- 4./5. scrape --------------------------------------------------------------------------

    def scrape(self) -> None:
        """Ours against the naive exporter holding the same objects; each round changes the same
        1% on both sides first."""
        reg, model = self.registry, self.model
        t = time.perf_counter()
        naive = NaiveExporter()
        now = time.time()
        for raw in self.source.objects:
            naive.apply(orjson.loads(raw), now)
        print(f"\n4. scrape; the naive prometheus_client exporter built from the same "
              f"{len(self.source.objects):,} objects in {time.perf_counter() - t:.1f} s",
              flush=True)
        sizes: dict[str, int] = {}

        def change_both() -> None:
            lines = self.source.lines(self.changed, distinct=True)
            apply_lines(model, lines)
            now = time.time()
            for line in lines:
                naive.apply(orjson.loads(line)["object"], now)

        def case(name: str, fn: Callable[[], bytes]) -> Callable[[], float]:
            def one() -> float:
                change_both()
                gc.collect()
                t = time.perf_counter()
                out = fn()
                elapsed = time.perf_counter() - t
                sizes[name] = len(out)
                return elapsed

            return one

        ours, prom = "ours: b''.join(render(registry))", "naive: generate_latest(registry)"
        b"".join(render(reg))  # what the watch section changed, so each round shows its 1%
        times = interleaved({
            ours: case(ours, lambda: b"".join(render(reg))),
            prom: case(prom, naive.scrape),
        }, self.args.scrape_repeat)  # fmt: skip
        print(f"after {self.changed:,} objects ({CHANGED:.0%}) changed, best of "
              f"{self.args.scrape_repeat}, interleaved")
        rows = [["in-process scrape", "time best (median, max)", "bytes"]]
        rows.append([ours, spread(times[ours]), f"{sizes[ours]:,}"])
        rows.append([prom, spread(times[prom]), f"{sizes[prom]:,}"])
        print(table(rows))
        ours_s, prom_s = min(times[ours]), min(times[prom])
        first = min(self.first_scrape)
        print(f"ours, the first scrape after a sync (every family joined): "
              f"{spread(self.first_scrape)}; naive / ours scrape time = {prom_s / ours_s:.1f}x",
              flush=True)
        v, target = self.verdicts, f"<= {TARGET_SCRAPE_S:g} s"
        v.add("scrape", "4. scrape, the first after sync", ms(first), target,
              first <= TARGET_SCRAPE_S)
        v.add("scrape", "   scrape after 1% changed", ms(ours_s), target,
              ours_s <= TARGET_SCRAPE_S)
        v.add("ratio", "5. naive generate_latest / ours", f"{prom_s / ours_s:.1f}x",
              f">= {TARGET_RATIO:g}x", prom_s / ours_s >= TARGET_RATIO)

    async def scrape_http(self) -> None:
        if self.args.http_repeat <= 0 or shutil.which("curl") is None:
            return
        from bench.scrape import curl

        runner, base = await start_site(MetricsServer(self.registry).app, "127.0.0.1:0")
        res: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
        try:
            for r in range(self.args.http_repeat):
                for gz in (False, True) if r % 2 == 0 else (True, False):
                    apply_lines(self.model, self.source.lines(self.changed, distinct=True))
                    gc.collect()
                    res[gz].append(await curl(f"{base}/metrics", gz))
        finally:
            await runner.cleanup()
        print(f"MetricsServer over HTTP (curl, loopback), after {CHANGED:.0%} changed, best of "
              f"{self.args.http_repeat}, interleaved")
        rows = [["encoding", "first byte", "total best (median)", "bytes on wire"]]
        for gz, rr in res.items():
            b = min(rr, key=lambda x: x[1])
            med = sorted(x[1] for x in rr)[len(rr) // 2]
            rows.append(["gzip" if gz else "identity", ms(b[0]), f"{ms(b[1])} ({ms(med)})",
                         f"{b[2]:,}"])
        print(table(rows), flush=True)
        for gz, rr in res.items():
            self.verdicts.add("scrape-http", f"   over HTTP, MetricsServer, "
                              f"{'gzip' if gz else 'identity'}", ms(min(x[1] for x in rr)),
                              "(report)", None)

    # -- profiles ------------------------------------------------------------------------------

    def profiles(self) -> None:
        """cProfile of each hot path whose target was missed (all of them with --profile)."""
        want = set(self.verdicts.missed)
        if self.args.profile:
            want |= {"sync-ours", "sync-http", "events", "scrape"}
        if want & {"sync-ours", "sync-http"}:
            # gc paused: the decode is one C call and the collector's share is measured above;
            # a fifth of the objects: the shares do not depend on the count once gc is paused
            gc.disable()
            try:
                items = decode_pages(self.pages[: max(1, len(self.pages) // 5)])
                model = fresh_model()[1]
                profiled(f"model.replace of {len(items):,} decoded objects (gc paused)",
                         lambda: model.replace(items, time.time()))
                del items, model
            finally:
                gc.enable()
        if "sync-http" in want and self.emu_profile:
            print("\n-- profile: the emulator's LIST handler, every 10th page while the pages "
                  "were fetched (its process; cProfile, top 15 by own time)")
            print(self.emu_profile, flush=True)
        if "events" in want:
            lines = self.source.lines(min(self.args.events, 20_000))
            profiled(f"{len(lines):,} watch lines: orjson.loads + model.upsert (gc on)",
                     lambda: apply_lines(self.model, lines))
        if "scrape" in want:
            b"".join(render(self.registry))  # what the events profile changed: not this 1%'s
            apply_lines(self.model, self.source.lines(self.changed, distinct=True))
            profiled("scrape after 1% changed", lambda: b"".join(render(self.registry)))


if __name__ == "__main__":
    main()
