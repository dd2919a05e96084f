"""`zaroz-exporter replay`: apply JSONL event logs and print the exposition or a summary."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from exporter.model.observations import Observer
from exporter.report.summary import (
    ANOMALIES,
    EXPIRE_EVERY,
    SummaryMetrics,
    anomaly_rows,
    summary_rows,
)
from exporter.sinks.metrics.exposition import Format, render
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.native import DEFAULT_NATIVE, NativeConfig
from exporter.sinks.metrics.workload import WorkloadMetrics
from exporter.sources.files import (
    NOT_JSON,
    LogFile,
    LogNotFound,
    expand,
    read_batches,
    read_numbered,
    workload_of,
)
from exporter.wiring.events import Pipeline

if TYPE_CHECKING:
    from exporter.sinks.traces.otlp import TraceSink

EXPLAIN_MAX = 20  # invalid lines explained before the rest are only counted


def apply_files(pipeline: Pipeline, files: Iterable[Path | LogFile], workload: str | None,
                explain: Explainer | None = None) -> None:
    """Apply every log in order; with `explain`, each invalid line is also explained (slower:
    lines one by one, each event validated a second time for its reason)."""
    for f in files:
        log_file = f if isinstance(f, LogFile) else LogFile(f, workload_of(f))
        name = workload or log_file.workload
        log = pipeline.workload(name)
        if explain is not None:
            explain.apply(log_file, log)
            pipeline.expire_workload(name, log.clock)
            continue
        offer_many = log.offer_many
        n = 0
        for batch in read_batches(log_file):
            offer_many(batch, NOT_JSON)
            n += len(batch)
            if n >= EXPIRE_EVERY:
                n = 0
                pipeline.expire_workload(name, log.clock)
    for name, log in pipeline.logs.items():
        log.flush()
        pipeline.expire_workload(name, log.clock)


class Explainer:
    """`replay --explain`: `file:line: reason` for each invalid line (python-jsonschema's
    message for a schema failure), at most `limit`, then how many more there were."""

    def __init__(self, out: IO[str], limit: int = EXPLAIN_MAX) -> None:
        self.out = out
        self.limit = limit
        self.invalid = 0

    def apply(self, log_file: LogFile, log: Any) -> None:
        from exporter.contract import is_valid_event

        for n, obj, error in read_numbered(log_file):
            if obj is NOT_JSON:
                log.reject_json()
                self._say(log_file, n, [f"not JSON: {error}"])
                continue
            log.offer(obj)
            if not is_valid_event(obj):
                from exporter.contract import explain

                self._say(log_file, n, explain("event", obj, max_errors=3))

    def _say(self, log_file: LogFile, line: int, reasons: list[str]) -> None:
        self.invalid += 1
        if self.invalid <= self.limit:
            self.out.write(f"{log_file.name}:{line}: {'; '.join(reasons) or 'invalid'}\n")

    def close(self) -> None:
        if self.invalid > self.limit:
            self.out.write(f"zaroz-exporter replay: {self.invalid - self.limit} more invalid "
                           f"lines not explained (--explain-max {self.limit})\n")


def _table(rows: list[tuple[str, ...]], out: IO[str]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def summary(pipeline: Pipeline, out: IO[str]) -> None:
    _table([("workload", "measurement", "count", "p50 s", "p95 s", "p99 s"),
            *summary_rows(pipeline)], out)
    out.write("\n")
    _table([("workload", "events", *(a for a, _ in ANOMALIES), "unknown types"),
            *anomaly_rows(pipeline)], out)


def _trace_sink(otlp_endpoint: str) -> TraceSink:
    """Replay never drops a span: a full queue is exported in the replaying thread."""
    from exporter.sinks.traces.otlp import TraceConfig, TraceSink

    return TraceSink.from_env(otlp_endpoint, TraceConfig(backpressure=True))


def finish_traces(pipeline: Pipeline, err: IO[str]) -> int:
    """End of the log: end every open unit's spans at its workload's last event, export all,
    and say what was sent. 1 when spans were lost (dropped or refused), else 0."""
    traces = pipeline.traces
    if traces is None:
        return 0
    traces.close_all({name: log.last_at for name, log in pipeline.logs.items()})
    traces.shutdown()
    st = traces.stats
    err.write(
        f"zaroz-exporter replay: traces: {st.spans} spans, {st.exported} exported, "
        f"{st.dropped} dropped, {st.export_failures} failed exports\n"
    )
    return 1 if st.dropped or st.failed_spans else 0


def shown_native(output: bool | Format, as_summary: bool,
                 native: NativeConfig | None) -> NativeConfig | None:
    """Native buckets only where the output can show them: the protobuf exposition. Text and
    OpenMetrics have no native histograms, and the summary reads the classic buckets, so
    computing them there is work nobody sees (replay knows its one output before it starts,
    unlike `serve`, whose next scraper may ask for protobuf)."""
    return native if output is Format.PROTOBUF and not as_summary else None


def run(
    files: Sequence[str],
    workload: str | None,
    as_summary: bool,
    openmetrics: bool | Format,
    otlp_endpoint: str | None = None,
    report: str | None = None,
    explain: bool = False,
    explain_max: int = EXPLAIN_MAX,
    native: NativeConfig | None = DEFAULT_NATIVE,
) -> int:
    """`otlp_endpoint` (a base URL, like OTEL_EXPORTER_OTLP_ENDPOINT): export every unit's
    lifecycle as traces too, with the OTEL_* environment for the rest (headers, protocol).
    `report`: also write the HTML incident report there, from the same pass.
    `explain`: say on stderr where each invalid line is and why (at most `explain_max`).
    `openmetrics`: True/False or a Format (protobuf: binary, written as is)."""
    try:
        logs = expand(files, stdin_workload=workload or "stdin")
    except LogNotFound as e:
        print(f"zaroz-exporter replay: error: {e}", file=sys.stderr)
        return 2
    if report and explain:
        # The report's pass does not explain lines (its anomalies give file:line already).
        print("zaroz-exporter replay: error: --explain cannot be combined with --report "
              "(the report lists every invalid line with its file and line)", file=sys.stderr)
        return 2
    if report:
        try:
            with open(report, "a", encoding="utf-8"):
                pass  # writable now, not after the whole log (an old report stays until then)
        except OSError as e:
            print(f"zaroz-exporter replay: --report {report}: {e}", file=sys.stderr)
            return 2
    factory: Callable[[Registry, str], Observer] = \
        SummaryMetrics if as_summary else WorkloadMetrics
    cursor = None
    if report:
        from exporter.report.record import Cursor, apply_files_recorded, recording

        cursor = Cursor()
        factory = recording(cursor)
    pipeline = Pipeline(
        Registry(native=shown_native(openmetrics, as_summary, native)),
        observer_factory=factory,
        traces=_trace_sink(otlp_endpoint) if otlp_endpoint else None,
    )
    explainer = Explainer(sys.stderr, explain_max) if explain else None
    try:
        if cursor is not None:
            apply_files_recorded(pipeline, logs, workload, cursor)
        else:
            apply_files(pipeline, logs, workload, explainer)
    finally:
        traces_rc = finish_traces(pipeline, sys.stderr)
        if explainer is not None:
            explainer.close()
    if report:
        from exporter.report.render import render as render_report

        try:
            Path(report).write_text(render_report(pipeline, [lf.short_name for lf in logs]),
                                    encoding="utf-8")
        except OSError as e:
            print(f"zaroz-exporter replay: --report {report}: {e}", file=sys.stderr)
            return 2
    if as_summary:
        summary(pipeline, sys.stdout)
    else:
        out = sys.stdout.buffer
        for chunk in render(pipeline.registry, openmetrics):
            out.write(chunk)
        out.flush()
    return traces_rc
