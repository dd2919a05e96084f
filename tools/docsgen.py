"""Writes the metric reference (docs/metrics.md) from the catalog and the flag tables of
docs/configuration.md from the argument parser.

`python -m tools.docsgen` regenerates both; a test fails when either is stale.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

from exporter import catalog
from exporter.catalog import Kind

ROOT = Path(__file__).resolve().parent.parent
CONFIGURATION = ROOT / "docs" / "configuration.md"
CONFIG_START, CONFIG_END = "<!-- config:start -->", "<!-- config:end -->"
GROUPS = {
    "lifecycle": "Unit lifecycle (event clock)",
    "events": "Applying the event log",
    "route": "Events route tailer",
    "cluster": "UnitSignals (cluster state)",
    "kube": "Kubernetes list/watch",
    "traces": "Traces (OTLP)",
    "webhook": "Webhooks",
    "checkpoint": "Checkpoints",
    "exporter": "The exporter itself",
}

INTERPRETATIONS = """\
## How the lifecycle is measured

The definitions in the platform's `measurements.md` are fixed. Where it is silent, the exporter
does this:

- Events of a workload are applied in `seq` order whatever order they arrive in, each once. A seq
  already applied (or already waiting) is not applied again; it counts in
  `zaroz_events_duplicate_total{source}` only when the same source (route, webhook, or file in
  replay) had delivered it before: the platform delivered it again. Otherwise it is the
  exporter's own overlap (a route backfill re-reading webhook deliveries, or a webhook delivery
  of what the route gave first) and counts in `zaroz_events_refetched_total{source}`.
  `webhook.ping` is no log event: it counts in `zaroz_webhook_pings_total` only. Seqs skipped
  are waited for and then given up as a
  gap (`zaroz_events_gaps_total` counts runs, `zaroz_events_missing_total` seqs): by the tailer as
  soon as a page skips them (the route is authoritative), at the end of input by `replay`.
- An event failing `event.schema.json` (formats asserted) uses up its seq, applies nothing and is
  counted in `zaroz_events_invalid_total{reason="schema"}`; a line that is not JSON counts with
  `reason="json"`.
- An event valid per the schema holding a value the exporter cannot hold is refused the same
  way, with `reason="range"` (the series appears at the first one), and logged once per field:
  an `occurred_at` outside 1970-01-01T00:00:00Z to 2262-04-11T23:47:16.854775807Z (the model
  keeps time as signed 64-bit nanoseconds since the Unix epoch, and the schema's `date-time`
  runs to year 9999), or a `units.scaled` count beyond 64-bit integers. A `seq` beyond
  2^63 - 2 counts too, and uses up no seq.
- Readiness and startups are measured only for units whose `unit.created` was seen; readiness
  once per unit (a restarted incarnation does not add a sample).
- A drain is measured from its first `unit.draining`; a repeated `unit.draining` before the drain
  ends neither restarts it nor adds a sample, and the reason is the first one's.
- A delivery or undelivery with no allocation pending changes nothing. A delivery whose
  interval is negative still counts as `delivered` but adds no ack sample (clock skew).
- Failure and destroy reasons are free text: the first 20 distinct reasons per workload keep
  their value, later ones are `other`. Exit codes keep the common values
  (0, 1, 2, 126, 127, 130, 134, 137, 139, 143); others are `other`.
- Unit state is dropped at `unit.destroyed`, or after `--unit-idle-timeout` without an event,
  measured on the workload's event clock (the latest `occurred_at` applied), so catching up on a
  backlog of any age drops nothing it is about to see again. Only once the log is caught up with
  the route (heard from recently) and idle does wall time count too: a unit then expires when
  its idle time in the log plus the wall time the log has been idle passes the timeout.

## Restarts and scrapers

- With `--state-dir`, every counter and histogram (per label set, with the first-come reason
  sets), the cursor and the model's state are checkpointed at each scrape, every
  `--checkpoint-interval` seconds and at shutdown. A restarted exporter continues its counters
  from the checkpoint, never from zero, and applies what came after its cursor exactly once, so
  its values equal an uninterrupted run's for every scraper (a Prometheus HA pair included).
RESTART_AT_ZERO
- A workload whose log is read from the start without a checkpoint (a new pod on an empty
  state dir) has its lifecycle and event-log series left out of `/metrics` until it has caught
  up with the route: the first sample a scraper sees is the caught-up baseline, and replaying
  days of retained log never shows as a burst in `rate()`/`increase()`. Readiness (`/readyz`)
  waits for the same.
- Native histogram buckets (`--native-histogram-schema`, sent in protobuf scrapes only) are
  kept by `serve` from its first observation, whether or not a scraper has asked for protobuf
  yet: a scraper that turns to protobuf later (a Prometheus restarted with native histograms
  on, one replica of a pair) sees native buckets that hold every observation the classic ones
  hold, from its first sample, and the checkpoint carries them across restarts. Starting them
  at the first protobuf scrape would leave out everything observed before it, which no later
  work can restore (the buckets would not add up to the sample count). The cost is one bucket
  index per observation; `--native-histogram-schema off` saves it. `replay` knows its one
  output before it starts and computes native buckets only for `--format protobuf`.

## How UnitSignals are measured

Two clocks, kept apart by name: the `zaroz_unit_*` histograms use the event log's `occurred_at`
(the platform's clock); the `zaroz_unitsignal_*` ones use the cluster and the exporter.

- The workload of a UnitSignal is its `units.zaroz.cloud/workload` label, else its namespace.
- `zaroz_unitsignal_generation_lag` is `spec.generation - status.observedGeneration`; a missing
  status counts as observedGeneration 0.
- A generation *appears* when the watch first shows it. One that was already there when the
  exporter first saw the object (start-up, relist) appeared at the spec's last write as
  `metadata.managedFields` records it (the entry owning `f:spec`, one-second precision, the API
  server's clock), clamped to the exporter's clock. It is *observed* when the watch shows
  `status.observedGeneration` reaching it. Every generation reached counts once in
  `zaroz_unitsignal_generation_observe_seconds`, including ones superseded before the agent
  caught up; a spec that goes back drops the generations above it.
- `zaroz_unitsignal_ready_seconds`: `metadata.creationTimestamp` (API server, one second) to
  `status.signalledReady` (agent clock), once per UnitSignal.
- `zaroz_unitsignal_allocation_ack_seconds`: `spec.allocation.allocatedAt` (kernel clock) or,
  without it, when the watch first showed the allocation, to when the watch shows
  `status.allocationAck` equal to its id. Not measured when the allocation was already there
  without `allocatedAt`, or already acknowledged, at first sight.
- Status fields that a JSON merge patch removed (patched to null) count as null.
- A generation, `status.observedGeneration` or `status.seq` beyond 64-bit integers, or a status
  or allocation time outside 1970-2262 (as for events), is read as null: nothing is measured
  from it, and it counts once per spec generation or status in
  `zaroz_unitsignal_conformance_violations_total{rule="out_of_range"}`.
- Conformance violations count when they happen, not on every write while they last: a spec is
  checked once per `metadata.generation`, a status whenever it changes.
- Phases: `draining` when `spec.draining` is set, else `allocated` when `spec.allocation` is,
  else `ready` when `status.signalledReady` is, else `starting`. A phase's start is the watch
  time of the change, or on first sight the object's own timestamp for it.
- `spec.userData` is never read into metrics, logs or traces.
- With `--state-dir`, what was measured of each UnitSignal (the generations waiting, the status
  last seen, readiness measured, allocations acknowledged, violations under way) is checkpointed
  with the counters, so the list after a restart measures only what changed while the exporter
  was down, as a relist after a watch gap does: an unchanged object adds nothing, a changed one
  is measured once, a deleted one leaves. Times the watch would have taken (a generation
  appearing or observed, an acknowledgement without `allocatedAt`) are then the list's. A
  checkpoint saved before this memory was kept measures every object once more at that first
  list (logged).
"""


def restart_at_zero() -> str:
    """The bullet listing the series that start again at a restart, from the catalog and the
    list of families the checkpoint leaves out (sinks.metrics.state.NOT_RESTORED)."""
    from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector

    from exporter.sinks.metrics.state import NOT_RESTORED

    own = sorted(NOT_RESTORED)
    gauges = sorted(m.name for m in catalog.METRICS
                    if m.name.startswith("zaroz_checkpoint_") and m.kind is catalog.Kind.GAUGE)
    reg = CollectorRegistry(auto_describe=False)
    counters = sorted(f"{fam.name}_total"
                      for c in (ProcessCollector(registry=reg), GCCollector(registry=reg))
                      for fam in c.collect() if fam.type == "counter")
    names = ", ".join
    return textwrap.fill(
        f"- What starts again at zero with a new process: {names(f'`{n}`' for n in own)} "
        "(this process's own saves) and the checkpoint gauges "
        f"{names(f'`{n}`' for n in gauges)} (0 until its first save), and the standard "
        f"counters of the process, {names(f'`{n}`' for n in counters)} (client_python's: "
        "CPU time and garbage collections of this process; `process_start_time_seconds` "
        "tells the restart). Every other counter and histogram continues.", width=96,
        subsequent_indent="  ", break_on_hyphens=False, break_long_words=False) + "\n"


def table(metrics: tuple[catalog.Metric, ...] = catalog.METRICS) -> str:
    out = []
    for group, title in GROUPS.items():
        rows = [m for m in metrics if m.group == group]
        if not rows:
            continue
        out.append(f"### {title}\n\n| metric | type | labels | meaning |\n|---|---|---|---|")
        for m in rows:
            labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
            kind = "gauge (info)" if m.kind is catalog.Kind.INFO else m.kind.value
            help_ = m.help.replace("|", "\\|")
            if m.buckets:
                help_ += " Buckets: " + ", ".join(f"{b:g}" for b in m.buckets) + "."
            if m.opt_in:
                help_ += " Opt-in: exported only with `--metric-opt-in-list`."
            out.append(f"| `{m.name}` | {kind} | {labels} | {help_} |")
        out.append("")
    missing = [m.name for m in metrics if m.group not in GROUPS]
    if missing:
        raise ValueError(f"metrics without a documented group: {missing}")
    return "\n".join(out)


def standard_table() -> str:
    """The process_* and python_* families `serve` adds, as client_python's collectors (on
    Linux) describe them."""
    from prometheus_client import (
        CollectorRegistry,
        GCCollector,
        PlatformCollector,
        ProcessCollector,
    )

    reg = CollectorRegistry(auto_describe=False)
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    collectors = (ProcessCollector(registry=reg), PlatformCollector(registry=reg),
                  GCCollector(registry=reg))
    for c in collectors:
        for fam in c.collect():
            name = fam.name + ("_total" if fam.type == "counter" else "")
            labels = sorted({k for s in fam.samples for k in s.labels})
            shown = ", ".join(f"`{x}`" for x in labels) or "-"
            rows.append(f"| `{name}` | {fam.type} | {shown} | {fam.documentation.rstrip('.')}. |")
    return "\n".join(rows) + "\n"


STANDARD_INTRO = """\
### The process (client_python's collectors)

`serve` and `demo` also expose the families every client_python exporter has, rendered by
prometheus_client's `ProcessCollector`, `PlatformCollector` and `GCCollector` after the catalog's
(names and help as the ecosystem has them, so the usual restart and memory alerts work;
`replay` prints only the catalog's):

"""


FAMILY_LISTS = """\
## Series cost and choosing families

Every family below costs a fixed number of series per workload (or per shard), except the
per-object ones: one series per UnitSignal each (`zaroz_unitsignal_labels` only for UnitSignals
with an allowlisted label), so they make up nearly all of a large cluster's exposition (see
docs/scaling.md for memory and scrape time per series).

| per-UnitSignal family | series per UnitSignal | default |
|---|---|---|
{rows}

At 100k UnitSignals the default set is {default_m} million series. `--metric-denylist
'zaroz_unitsignal_.*'` drops them all, and with them the per-workload `zaroz_unitsignal_*`
families (the cluster-clock histograms, conformance and skew counters). To drop exactly the
per-UnitSignal ones and keep those:

```
--metric-denylist '{per_object_regex}'
```

The lists work as in kube-state-metrics: regular expressions matched anywhere in the family name
(anchor with `^...$`), `--metric-allowlist` and `--metric-denylist` mutually exclusive, opt-in
families only with `--metric-opt-in-list`; a pattern that matches no family is logged at start,
and so is every family not exported, with the reason (opt-in, allowlist or denylist).
A family not exported is never rendered, and with no per-object family exported the
per-UnitSignal rows are not even stored (bench/README.md has the figures).
"""


def family_lists() -> str:
    per = [m for m in catalog.METRICS if m.per_object]
    rows = "\n".join(
        f"| `{m.name}` | {'0 or 1' if m.name == 'zaroz_unitsignal_labels' else 1} | "
        f"{'opt-in' if m.opt_in else 'on'} |" for m in per)
    default = sum(1 for m in per if not m.opt_in and m.name != "zaroz_unitsignal_labels")
    names = "|".join(m.name.removeprefix("zaroz_unitsignal_") for m in per)
    return FAMILY_LISTS.format(rows=rows, default_m=f"{default * 0.1:.1f}",
                               per_object_regex=f"^zaroz_unitsignal_({names})$")


def metrics_doc() -> str:
    return (
        "<!-- long: generated reference of every metric and its mapping over OTLP -->\n"
        "# Metric reference\n\n"
        "Generated from `exporter/catalog.py` by `python -m tools.docsgen`; do not edit.\n\n"
        f"{INTERPRETATIONS.replace('RESTART_AT_ZERO' + chr(10), restart_at_zero())}"
        f"\n## Metrics\n\n{table()}\n{STANDARD_INTRO}{standard_table()}\n"
        f"{family_lists()}"
        f"{otlp_mapping()}"
    )


OTLP_INTRO = """
## Over OTLP

With `--otlp-metrics-endpoint` (docs/otlp-metrics.md) the same families, allowlist and
selection as a scrape are pushed every interval, cumulative, mapped on purpose:

- a counter is a monotonic cumulative **Sum**, a gauge or an info metric a **Gauge** (no start
  time); a histogram's classic buckets a **Histogram** with explicit bounds (the `le` bounds,
  +Inf implied by the count), and its native buckets (unless
  `--native-histogram-schema off`) an **ExponentialHistogram** of the same name: the schema is
  the scale, the zero bucket is kept with its threshold, Prometheus' bucket i,
  (base^(i-1), base^i], is OTLP's bucket i-1;
- exemplars keep their trace and span ids (the `trace_id` and `span_id` labels as
  `Exemplar.trace_id` and `.span_id`), value and time;
- every Sum, Histogram and ExponentialHistogram point carries its series' start time, stored in
  the checkpoint: the same across restarts and pod replacements on the same state, a new one
  for a series made again or a state lost;
- names and units as the OpenTelemetry Prometheus-compatibility spec maps them: a counter loses
  `_total`, a unit suffix becomes the UCUM unit (`_seconds` → `s`, `_bytes` → `By`), so a
  receiver that adds suffixes back (VictoriaMetrics with `-opentelemetry.usePrometheusNaming`,
  a Collector's `prometheus` or `prometheusremotewrite` exporter, Prometheus' OTLP receiver)
  stores each series under the name below's left column;
- the resource: `service.name` (`zaroz-exporter`, or `OTEL_SERVICE_NAME`), `service.instance.id`
  (`--instance`: stable, never random), `service.version`, `zaroz.shard`, and `k8s.pod.name`,
  `k8s.namespace.name` from `POD_NAME`, `POD_NAMESPACE` (the downward API).

"""


def otlp_mapping() -> str:
    from exporter.sinks.metrics.otlp.names import otel_name

    types = {Kind.COUNTER: "Sum (monotonic, cumulative)", Kind.GAUGE: "Gauge",
             Kind.INFO: "Gauge", Kind.HISTOGRAM: "Histogram + ExponentialHistogram"}
    rows = ["| metric | OTLP name | unit | OTLP type |", "|---|---|---|---|"]
    for m in catalog.METRICS:
        name, unit = otel_name(m.name, m.kind is Kind.COUNTER)
        rows.append(f"| `{m.name}` | `{name}` | {f'`{unit}`' if unit else ''} | {types[m.kind]} |")
    return OTLP_INTRO + "\n".join(rows) + "\n"


def configuration() -> str:
    """Every command's flags with their environment variables and defaults, from the parser."""
    from unittest import mock

    from exporter.cli import ENV_PREFIX, build_parser

    clean = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    with mock.patch.dict(os.environ, clean, clear=True):
        parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    commands: list[tuple[str, argparse.ArgumentParser]] = []
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if nested:  # `state check`, `state backup`
            commands += [(f"{name} {n}", q) for a in nested for n, q in a.choices.items()]
        else:
            commands.append((name, p))
    out = []
    for name, p in commands:
        out.append(f"### `zaroz-exporter {name}`\n\n| flag | environment | default | meaning |"
                   "\n|---|---|---|---|")
        for a in p._actions:
            if not a.option_strings or a.dest == "help":
                continue
            text, _, env = (a.help or "").partition(" [env ")
            text, env = text.replace("|", "\\|"), env.rstrip("]")
            default = "" if a.default in (None, [], False) else f"`{a.default}`"
            out.append(f"| `{a.option_strings[-1]}` | `{env}` | {default} | {text} |")
        out.append("")
    return "\n".join(out)


def _between(text: str, start: str, end: str, body: str) -> str:
    head, sep, rest = text.partition(start)
    _, sep2, tail = rest.partition(end)
    if not sep or not sep2:
        raise ValueError(f"{CONFIGURATION.name} lacks the {start} ... {end} markers")
    return f"{head}{start}\n{body}{end}{tail}"


def with_configuration(doc: str) -> str:
    """docs/configuration.md with its flag tables (between the config markers) regenerated."""
    return _between(doc, CONFIG_START, CONFIG_END, configuration())


def main() -> int:
    (ROOT / "docs").mkdir(exist_ok=True)
    (ROOT / "docs" / "metrics.md").write_text(metrics_doc())
    CONFIGURATION.write_text(with_configuration(CONFIGURATION.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
