"""Span records -> OTLP, with counted drops and failures.

The SDK's OTLP exporters send (retries and the standard `OTEL_*` configuration). The span
records are encoded straight into OTLP requests and batched by `batch.Batcher` (see wire.py for
why); any other SpanExporter (tests, the bench's no-op) gets SDK spans through the SDK's
`TracerProvider` + `BatchSpanProcessor`, started with explicit parent contexts, ids
(`ids.PresetIds`) and event-clock times, so the SDK adds nothing of its own but the Resource.

Why the wrappers: the BatchSpanProcessor drops spans silently when its queue is full (measured:
the default 2048-span queue lost about half of a 17k spans/s burst), and the exporter's failures
only reach a log. `CountingProcessor` and `CountingExporter` count both into `TraceStats`, which
the metrics read at scrape time. With `backpressure=True` (replay) a full queue is flushed in the
caller's thread instead of dropping, so a replay loses no span.

With a state directory (`checkpointed`) neither queue is used: spans wait in the outbox, and its
own export thread (`sender.Sender`) pulls batches from it, encoded or through SDK spans, and
retries each until the collector accepts it (see outbox.py).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Status, StatusCode

from exporter import __version__
from exporter.sinks.metrics.family import Registry
from exporter.sinks.traces.batch import Batcher
from exporter.sinks.traces.builder import SpanRecord, TraceBuilder
from exporter.sinks.traces.exportlog import ExportLog
from exporter.sinks.traces.outbox import DEFAULT_MAX_WAITING, Outbox
from exporter.sinks.traces.sender import Sender
from exporter.sinks.traces.transport import encoded_capable
from exporter.sinks.traces.wire import Encoder

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE_SIZE = 65_536  # ~4 s of a 17k spans/s burst; a span here is ~1-2 KiB
DEFAULT_MAX_EXPORT_BATCH_SIZE = 4_096
DEFAULT_SCHEDULE_DELAY_MS = 1_000
HTTP = "http/protobuf"
GRPC = "grpc"
_SAMPLED = trace_api.TraceFlags(trace_api.TraceFlags.SAMPLED)


class PresetIds(IdGenerator):
    """An IdGenerator that hands out the ids set just before `start_span`.

    The SDK asks its IdGenerator for a span id on every span and for a trace id on root spans;
    presetting them is the supported way to give SDK spans chosen ids. Not thread-safe: one
    emitting thread per TracerProvider (the event loop).
    """

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_id = 0

    def generate_span_id(self) -> int:
        return self.span_id

    def generate_trace_id(self) -> int:
        return self.trace_id

    def is_trace_id_random(self) -> bool:
        # Hash-derived ids are uniform but not random in W3C's sense (they repeat by design).
        return False


COUNTERS = ("spans", "exported", "dropped", "export_failures", "resent")


class TraceStats:
    """Counters written by the emitting thread (spans, dropped) and the export thread (the rest);
    each has one writer, and the metrics only read them."""

    def __init__(self) -> None:
        self.spans = 0  # ended (with a checkpoint: held; else offered to the queue)
        self.dropped = 0  # never handed to the exporter: queue or outbox full, left at shutdown
        self.handed = 0  # handed to the exporter
        self.exported = 0  # accepted by the receiver
        self.export_failures = 0  # export calls (batches) that failed
        self.failed_spans = 0  # spans in those batches
        self.resent = 0  # sent again at start: released before a kill, not known accepted


def counted_export(stats: TraceStats, export_log: ExportLog | None, n: int,
                   export: Callable[[], bool]) -> bool:
    """One export call of `n` spans (encoded or SDK spans), counted: handed, then exported or
    failed. An exception is a failure, logged: an exporter bug must not kill the export
    thread. A success also tells the export log (it logs the recovery from failures)."""
    stats.handed += n
    try:
        ok = export()
    except Exception:
        log.exception("OTLP span export raised")
        ok = False
    if ok:
        stats.exported += n
        if export_log is not None:
            export_log.success()
    else:
        stats.export_failures += 1
        stats.failed_spans += n
    return bool(ok)


class CountingExporter(SpanExporter):
    def __init__(self, inner: SpanExporter, stats: TraceStats,
                 export_log: ExportLog | None = None) -> None:
        self.inner = inner
        self.stats = stats
        self.export_log = export_log

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        ok = counted_export(self.stats, self.export_log, len(spans),
                            lambda: self.inner.export(spans) is SpanExportResult.SUCCESS)
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


class CountingProcessor(SpanProcessor):
    """Counts spans and queue-full drops around a BatchSpanProcessor.

    The queue's length is read from the SDK's BatchProcessor (`_batch_processor._queue`, a
    bounded deque that drops its oldest item when full); if a later SDK moves it, drops are
    still counted at shutdown, as spans offered but never handed to the exporter.
    """

    def __init__(self, inner: BatchSpanProcessor, stats: TraceStats, backpressure: bool) -> None:
        self.inner = inner
        self.stats = stats
        self.backpressure = backpressure
        bp = getattr(inner, "_batch_processor", None)
        q = getattr(bp, "_queue", None)
        self._queue = q if q is not None and getattr(q, "maxlen", None) else None
        # Set by the outbox's export thread: ended spans are collected here, for one export
        # call, instead of queued (they were counted when held).
        self.capture: list[ReadableSpan] | None = None
        self.pulled = False  # spans are pulled from an outbox: none waits here at shutdown

    def on_start(self, span: object, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.capture is not None:
            self.capture.append(span)
            return
        st = self.stats
        st.spans += 1
        q = self._queue
        if q is not None and len(q) >= q.maxlen:
            if self.backpressure:
                self.inner.force_flush()
            else:
                st.dropped += 1
        self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()
        if not self.pulled:
            st = self.stats
            st.dropped = max(st.dropped, st.spans - st.handed)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _protocol(protocol: str | None) -> str:
    p = protocol or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", HTTP
    )
    p = p.strip().lower()
    if p not in (HTTP, GRPC):
        raise ValueError(f"unsupported OTLP protocol {p!r}: use {HTTP} or {GRPC}")
    return p


def traces_url(endpoint: str) -> str:
    """A base OTLP/HTTP endpoint (like OTEL_EXPORTER_OTLP_ENDPOINT) -> its /v1/traces URL;
    a URL whose path already ends in /v1/traces is kept."""
    if urlsplit(endpoint).path.rstrip("/").endswith("/v1/traces"):
        return endpoint
    return endpoint.rstrip("/") + "/v1/traces"


def otlp_exporter(
    endpoint: str | None = None, protocol: str | None = None, timeout: float | None = None
) -> SpanExporter:
    """The OTLP span exporter the OTEL_* environment describes; `endpoint` (a base URL, as
    `--otlp-endpoint` gives it) overrides the environment's. gRPC needs the `grpc` extra.
    It also takes requests already encoded (see transport.py)."""
    from exporter.sinks.traces import transport

    if _protocol(protocol) == GRPC:
        try:
            return transport.grpc_exporter(endpoint=endpoint, timeout=timeout)
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "OTLP over gRPC needs the grpc extra: pip install 'zaroz-exporter[grpc]'"
            ) from e
    return transport.http_exporter(
        endpoint=traces_url(endpoint) if endpoint else None, timeout=timeout,
        session=_http_session(),
    )


def _http_session() -> Any:
    """A requests Session that keeps the CA file the exporter sets (OTEL_EXPORTER_OTLP_[TRACES_]
    CERTIFICATE): plain requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, set in many base
    images, override a session's `verify`, so the collector's private CA was silently ignored
    (found by the TLS test). Proxies and the rest of the environment still apply. None when an
    OTEL_PYTHON credential provider is configured: the SDK then builds its session."""
    if any(k.startswith("OTEL_PYTHON_EXPORTER_OTLP_") and k.endswith("CREDENTIAL_PROVIDER")
           for k in os.environ):
        return None
    import requests

    class Session(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                       cert: Any) -> Any:
            if verify is None:
                verify = self.verify
            return super().merge_environment_settings(url, proxies, stream, verify, cert)

    return Session()


def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    try:
        return int(v) if v else default
    except ValueError:
        return default


@dataclass
class TraceConfig:
    """Batching knobs; each defaults to its OTEL_BSP_* variable, then to a burst-sized value."""

    max_queue_size: int = 0
    max_export_batch_size: int = 0
    schedule_delay_millis: int = 0
    backpressure: bool = False  # flush in the caller instead of dropping (replay)
    max_pending: int = 0  # with a checkpoint: spans waiting for the collector, at most

    def resolved(self) -> TraceConfig:
        q = self.max_queue_size or _env_int("OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_MAX_QUEUE_SIZE)
        b = self.max_export_batch_size or _env_int(
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", DEFAULT_MAX_EXPORT_BATCH_SIZE
        )
        d = self.schedule_delay_millis or _env_int("OTEL_BSP_SCHEDULE_DELAY",
                                                   DEFAULT_SCHEDULE_DELAY_MS)
        return TraceConfig(q, min(b, q), d, self.backpressure,
                           self.max_pending or DEFAULT_MAX_WAITING)


def default_resource() -> Resource:
    """`service.name` from OTEL_SERVICE_NAME (else zaroz-exporter), a `service.instance.id` per
    process (the pod name when HOSTNAME is set, plus a uuid), and OTEL_RESOURCE_ATTRIBUTES."""
    instance = f"{os.environ.get('HOSTNAME', 'local')}-{uuid.uuid4().hex[:12]}"
    attrs = {
        "service.name": os.environ.get("OTEL_SERVICE_NAME") or "zaroz-exporter",
        "service.version": __version__,
        "service.instance.id": instance,
    }
    return Resource.create(attrs)


class TraceSink:
    """Owns the export pipeline; hands out one `TraceBuilder` (a WorkloadLog tap) per workload.

    Spans are emitted from the thread that applies events (the event loop), one at a time.
    Two pipelines, the same spans on the wire (tests compare them byte for byte):
    - encoded (an exporter from `otlp_exporter`, unless `sdk=True`): records are queued in a
      `Batcher` and encoded straight into OTLP requests (`wire`), sent by the SDK's exporter;
    - SDK (any other SpanExporter): each record becomes an SDK span, through the
      TracerProvider and BatchSpanProcessor.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        config: TraceConfig | None = None,
        *,
        resource: Resource | None = None,
        idle_ns: int = 24 * 3600 * 10**9,
        export_log: ExportLog | None = None,
        sdk: bool = False,
    ) -> None:
        c = (config or TraceConfig()).resolved()
        self.export_log = export_log
        if export_log is not None:
            export_log.install()
        self.config = c
        self.idle_ns = idle_ns
        self.stats = TraceStats()
        self.builders: dict[str, TraceBuilder] = {}
        self.exporter = exporter
        self.outbox: Outbox | None = None  # with a checkpoint: spans wait for it (see outbox)
        self.sender: Sender | None = None  # with a checkpoint: the export thread
        self._acked0 = 0  # the outbox's mark when this process started
        self._closed = False
        self._base = dict.fromkeys(COUNTERS, 0)  # restored from the checkpoint
        self._frozen: dict[str, int] | None = None  # the stats of the last state()
        self._moved: set[str] | None = None  # see track
        resource = resource or default_resource()
        self.encoded = False
        if not sdk and encoded_capable(exporter):
            self.encoded = True
            self._encoded_to = exporter
            self.encoder = Encoder(resource.attributes, "zaroz-exporter", __version__)
            self.batcher = Batcher(
                self._export_encoded, self.stats, max_queue_size=c.max_queue_size,
                max_batch=c.max_export_batch_size, delay_s=c.schedule_delay_millis / 1000,
                backpressure=c.backpressure)
            self.send: Callable[[SpanRecord], None] = self.batcher.put
            return
        self.send = self._send_sdk
        self._ids = PresetIds()
        self._counting = CountingExporter(exporter, self.stats, export_log)
        batch = BatchSpanProcessor(
            self._counting,
            max_queue_size=c.max_queue_size,
            schedule_delay_millis=c.schedule_delay_millis,
            max_export_batch_size=c.max_export_batch_size,
        )
        self.processor = CountingProcessor(batch, self.stats, c.backpressure)
        self.provider = TracerProvider(
            sampler=ALWAYS_ON, resource=resource, id_generator=self._ids
        )
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("zaroz-exporter", __version__)

    def _export_encoded(self, batch: list[SpanRecord]) -> None:
        """One batch (the Batcher's thread, or the caller's under backpressure)."""
        n = len(batch)
        counted_export(self.stats, self.export_log, n, lambda: self._encoded_to.export_encoded(
            self.encoder.request(batch), n))

    def _export_batch(self, batch: list[SpanRecord]) -> bool:
        """One batch from the outbox (its export thread): True when the collector accepted it."""
        n = len(batch)
        if self.encoded:
            return counted_export(self.stats, self.export_log, n,
                                  lambda: self._encoded_to.export_encoded(
                                      self.encoder.request(batch), n))
        spans = self.processor.capture = []
        try:
            for r in batch:
                self._send_sdk(r)
        finally:
            self.processor.capture = None
        return counted_export(self.stats, self.export_log, n,
                              lambda: self.exporter.export(spans) is SpanExportResult.SUCCESS)

    @classmethod
    def from_env(
        cls,
        endpoint: str | None = None,
        config: TraceConfig | None = None,
        *,
        protocol: str | None = None,
        idle_ns: int = 24 * 3600 * 10**9,
    ) -> TraceSink:
        exporter = otlp_exporter(endpoint, protocol)
        shown = str(getattr(exporter, "_endpoint", None) or endpoint or "OTEL_* environment")
        return cls(exporter, config, idle_ns=idle_ns, export_log=ExportLog(shown))

    def builder(self, workload: str) -> TraceBuilder:
        b = self.builders.get(workload)
        if b is None:
            b = self.builders[workload] = TraceBuilder(workload, self.emit, idle_ns=self.idle_ns)
            if self._moved is not None:
                b.track(self._moved)
        return b

    def track(self, moved: set[str]) -> None:
        """Every builder records its changes from now on (incremental checkpoints)."""
        self._moved = moved
        for b in self.builders.values():
            b.track(moved)

    def units_tracked(self) -> int:
        return sum(len(b.units) for b in self.builders.values())

    # -- checkpoint hooks (wiring/state/checkpoint.py): see outbox.py for why and how ------------

    def checkpointed(self, state_dir: str | Path) -> None:
        """Spans are from now on held until a checkpoint in `state_dir` covers them, then
        pulled from the outbox by its own export thread (the queue is not used)."""
        if self.outbox is None:
            self.outbox = Outbox(state_dir, self.config.max_pending)
            self._acked0 = self.outbox.mark.value
            if self.encoded:
                self.batcher.shutdown()
            else:
                self.processor.pulled = True
            self.sender = Sender(self.outbox, self._export_batch,
                                 self.config.max_export_batch_size)

    def state(self) -> dict[str, Any]:
        """Plain JSON-able data: every builder's open spans, the spans not yet handled, and the
        counters. The counters exposed from now on are these (until the next state()), so no
        scraper sees more than a checkpoint holds and the successor continues them (the export
        thread moves the live ones between a save and a render)."""
        stats = self.freeze()
        return {"builders": {w: b.state() for w, b in self.builders.items()},
                "outbox": self.outbox.state() if self.outbox is not None else None,
                "stats": stats}

    def freeze(self) -> dict[str, int]:
        """The counters as exposed until the next call (see `state`), for a checkpoint.

        With an outbox, `exported` is read off the mark (every serial at or below it was
        accepted once), and the checkpoint keeps the mark it was read at (`acked`): spans
        accepted after this save and before a kill are then added back at the next start
        (`restore`), so the counter is exact across a restart, however the mark and the
        checkpoint were interleaved."""
        st = self.stats
        frozen = {k: getattr(st, k) for k in COUNTERS}
        out: dict[str, int] = {}
        if self.outbox is not None:
            acked = self.outbox.mark.value
            frozen["exported"] = acked - self._acked0
            out["acked"] = acked
        self._frozen = frozen
        out.update({k: self._base[k] + v for k, v in frozen.items()})
        return out

    def saved(self, through: int | None = None) -> None:
        """The checkpoint with `state()` (the spans held up to serial `through`) is on disk."""
        if self.outbox is not None:
            self.outbox.saved(through)

    def restore(self, data: Mapping[str, Any]) -> None:
        for w, st in data["builders"].items():
            self.builder(w).restore(st)
        stats = data.get("stats") or {}
        self._base = {k: int(stats.get(k, 0)) for k in COUNTERS}
        box = self.outbox
        if box is not None and "acked" in stats:  # accepted after that save, before the stop
            self._base["exported"] += max(0, self._acked0 - int(stats["acked"]))
        if box is not None and data.get("outbox") is not None:
            before = box.resent
            box.restore(data["outbox"])
            self.stats.resent += box.resent - before

    # -- spans -----------------------------------------------------------------------------------

    def emit(self, r: SpanRecord) -> None:
        """A finished span: held for the next checkpoint when there is one, else sent."""
        if self.outbox is not None:
            st = self.stats
            st.spans += 1
            if not self.outbox.hold(r):
                st.dropped += 1
        else:
            self.send(r)

    def _send_sdk(self, r: SpanRecord) -> None:
        """SDK pipeline (`send`): one finished span record -> one SDK span, ended at once (so
        the processor queues it). The encoded pipeline sends with `Batcher.put` instead."""
        ids = self._ids
        ids.trace_id = r.trace_id
        ids.span_id = r.span_id
        if r.parent_id:
            parent = trace_api.SpanContext(r.trace_id, r.parent_id, False, _SAMPLED)
            ctx = trace_api.set_span_in_context(trace_api.NonRecordingSpan(parent), Context())
        else:
            ctx = Context()  # explicit: never the ambient context
        span = self.tracer.start_span(r.name, ctx, attributes=r.attributes, start_time=r.start_ns)
        for name, ns, attrs in r.events:
            span.add_event(name, attrs, timestamp=ns)
        if r.error is not None:
            span.set_status(Status(StatusCode.ERROR, r.error))
        span.end(end_time=r.end_ns)

    def close_all(self, at: Mapping[str, str] | None = None) -> None:
        """End every open unit's spans (replay: the log is over), at `at[workload]` (the log's
        last occurred_at) or else at each unit's last event."""
        for w, b in self.builders.items():
            b.close_all((at or {}).get(w) or None)

    def register(self, registry: Registry) -> None:
        """Expose the counters as catalog metrics, read at scrape time (they are written from
        the export thread, and pushing into series from two threads would race)."""
        for name, field_ in (("zaroz_traces_spans_total", "spans"),
                             ("zaroz_traces_spans_exported_total", "exported"),
                             ("zaroz_traces_spans_dropped_total", "dropped"),
                             ("zaroz_traces_export_failures_total", "export_failures")):
            registry.counter(name).callback((), functools.partial(self.count, field_))
        registry.counter("zaroz_traces_spans_resent_total").callback(
            (), functools.partial(self.count, "resent"))
        registry.gauge("zaroz_traces_units_tracked").callback((), self.units_tracked)
        registry.gauge("zaroz_traces_spans_waiting").callback((), self.waiting)

    def count(self, field_: str) -> int:
        """A counter as exposed: continued from the checkpoint; with one, as of its last save."""
        frozen = self._frozen
        if frozen is not None:
            return self._base[field_] + frozen[field_]
        if field_ == "exported" and self.outbox is not None:
            return self._base[field_] + self.outbox.mark.value - self._acked0
        live: int = getattr(self.stats, field_)
        return self._base[field_] + live

    def waiting(self) -> int:
        """Spans ended and not yet accepted by the collector: with a checkpoint, those held or
        released (in memory and in the checkpoint); else those in the export queue."""
        if self.outbox is not None:
            return self.outbox.waiting()
        return len(self.batcher.queue) if self.encoded else 0

    def flush(self, timeout_millis: int = 30_000) -> bool:
        if self.outbox is not None:
            return self.outbox.waiting() == 0
        if self.encoded:
            return self.batcher.flush()
        return self.processor.force_flush(timeout_millis)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Export what is queued and stop; open spans are not exported (see builder).

        With `timeout` (seconds), give up after it: the SDK's flush retries an unreachable
        collector for up to its export timeout, and a shutdown must not wait for that. What was
        not exported by then is counted as dropped. True when everything finished in time."""
        if self._closed:
            return True
        self._closed = True
        done = True
        if timeout is None:
            self._stop()
        else:
            worker = threading.Thread(target=self._stop, name="otlp-shutdown", daemon=True)
            worker.start()
            worker.join(timeout)
            if worker.is_alive():  # interrupt the exporter's retry wait
                done = False
                if self.sender is not None:
                    self.sender.stop()
                self.exporter.shutdown()
                if self.outbox is not None:  # nothing is lost: the checkpoint holds them
                    log.warning("OTLP trace export stopped at shutdown; the spans waiting are "
                                "in the checkpoint and sent at the next start", extra={
                                    "timeout_s": timeout, "spans_waiting": self.outbox.waiting()})
                else:  # the rest is dropped
                    st = self.stats
                    st.dropped = max(st.dropped, st.spans - st.exported)
                    log.warning("OTLP trace export gave up at shutdown",
                                extra={"timeout_s": timeout, "spans_dropped": st.dropped})
        if done and self.export_log is not None:
            self.export_log.remove()  # else the worker may still log its last retry
        if done and self.outbox is not None:  # else the export thread may still write the mark
            self.outbox.close()
        return done

    def _stop(self) -> None:
        if self.sender is not None:
            self.sender.drain(None)
        if self.encoded:
            self.batcher.shutdown()
            self.exporter.shutdown()
        else:
            self.provider.shutdown()
