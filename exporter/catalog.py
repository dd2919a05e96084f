"""Every metric the exporter exposes, declared once.

The exposition, the README's metric reference, the dashboards and the alert rules are all derived
from this module, so none of them can name a metric that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()
    unit: str = ""
    group: str = ""
    # One series per Kubernetes object: kept as bare pre-rendered lines (see sinks.metrics.table).
    per_object: bool = False
    # Exported only when --metric-opt-in-list names it (expensive, seldom needed; families.py).
    opt_in: bool = False

    @property
    def family(self) -> str:
        """The OpenMetrics family name (no `_total` or `_info` suffix)."""
        if self.kind is Kind.COUNTER:
            return self.name.removesuffix("_total")
        if self.kind is Kind.INFO:
            return self.name.removesuffix("_info")
        return self.name


# Buckets hold every threshold that alerts and SLOs use (measurements.md: readiness and drain from
# 0.1 s to an hour; allocation ack from 5 ms to a minute; generation observe from 50 ms to 10 min).
READY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
DRAIN_BUCKETS = READY_BUCKETS
ACK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
OBSERVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

_W = ("workload",)
_US = ("namespace", "unitsignal", "workload")

METRICS: tuple[Metric, ...] = (
    # Headline measurements (event clock), names fixed by measurements.md.
    Metric(
        "zaroz_unit_ready_seconds", Kind.HISTOGRAM,
        "Time from a unit's unit.created to its first unit.ready (event clock).",
        _W, READY_BUCKETS, "seconds", "lifecycle",
    ),
    Metric(
        "zaroz_unit_allocation_ack_seconds", Kind.HISTOGRAM,
        "Time from a unit.allocated to the unit's next unit.allocation_delivered (event clock).",
        _W, ACK_BUCKETS, "seconds", "lifecycle",
    ),
    Metric(
        "zaroz_unit_drain_seconds", Kind.HISTOGRAM,
        "Time from a unit.draining to the unit's first following stopped, exited, failed or "
        "destroyed event (event clock).",
        ("workload", "reason"), DRAIN_BUCKETS, "seconds", "lifecycle",
    ),
    Metric(
        "zaroz_unit_allocations_total", Kind.COUNTER,
        "Allocations by outcome: delivered, undelivered, superseded, abandoned.",
        ("workload", "outcome"), group="lifecycle",
    ),
    Metric(
        "zaroz_unit_startups_total", Kind.COUNTER,
        "Unit startups by outcome: ready, or failed/destroyed before the first unit.ready.",
        ("workload", "outcome"), group="lifecycle",
    ),
    Metric(
        "zaroz_unit_exits_total", Kind.COUNTER,
        "unit.exited events by exit code (common codes, else other) and whether it restarted.",
        ("workload", "code", "restarted"), group="lifecycle",
    ),
    Metric(
        "zaroz_unit_failures_total", Kind.COUNTER,
        "unit.failed events by reason (the first reasons seen per workload, then other).",
        ("workload", "reason"), group="lifecycle",
    ),
    Metric(
        "zaroz_unit_destroyed_total", Kind.COUNTER,
        "unit.destroyed events by reason (the first reasons seen per workload, then other).",
        ("workload", "reason"), group="lifecycle",
    ),
    Metric(
        "zaroz_workload_desired_units", Kind.GAUGE,
        "Desired unit count of the workload, from the latest units.scaled event.",
        _W, group="lifecycle",
    ),
    Metric(
        "zaroz_workload_units_tracked", Kind.GAUGE,
        "Units the lifecycle model holds state for (created, not yet destroyed or expired).",
        _W, group="lifecycle",
    ),
    Metric(
        "zaroz_workload_units_expired_total", Kind.COUNTER,
        "Units whose state was dropped after the idle time limit without a unit.destroyed.",
        _W, group="lifecycle",
    ),
    # Applying the event log.
    Metric(
        "zaroz_events_total", Kind.COUNTER,
        "Events applied, by type (unknown types share the value `unknown`).",
        ("workload", "type"), group="events",
    ),
    Metric(
        "zaroz_events_duplicate_total", Kind.COUNTER,
        "Events the platform delivered again: a seq the same source (route, webhook, or file in "
        "replay) had already delivered, after it was applied or while it waited. Not applied "
        "again.",
        ("workload", "source"), group="events",
    ),
    Metric(
        "zaroz_events_refetched_total", Kind.COUNTER,
        "Events received again through the exporter's own overlap, not the platform's: a seq "
        "already applied or waiting, from a source that had not delivered it before (a route "
        "backfill re-reading webhook deliveries, or a webhook delivery of what the route gave "
        "first). Not applied again.",
        ("workload", "source"), group="events",
    ),
    Metric(
        "zaroz_events_gaps_total", Kind.COUNTER,
        "Runs of skipped seqs given up as lost.",
        _W, group="events",
    ),
    Metric(
        "zaroz_events_missing_total", Kind.COUNTER,
        "Seqs given up as lost (the events inside the gaps, and ranges expired from the route).",
        _W, group="events",
    ),
    Metric(
        "zaroz_events_invalid_total", Kind.COUNTER,
        "Events not applied: not JSON (reason json), failing event.schema.json (reason schema), "
        "or valid but holding a value the exporter cannot hold (reason range: occurred_at "
        "outside 1970-01-01T00:00:00Z..2262-04-11T23:47:16.854775807Z, the model's integer "
        "nanosecond clock, or a seq or units.scaled count beyond 64-bit integers).",
        ("workload", "reason"), group="events",
    ),
    Metric(
        "zaroz_events_clock_skew_total", Kind.COUNTER,
        "Intervals not observed because their end came before their start.",
        ("workload", "measurement"), group="events",
    ),
    Metric(
        "zaroz_events_last_seq", Kind.GAUGE,
        "Seq of the last event applied (or given up) for the workload.",
        _W, group="events",
    ),
    Metric(
        "zaroz_events_last_occurred_timestamp_seconds", Kind.GAUGE,
        "occurred_at of the last event applied, as Unix time.",
        _W, unit="seconds", group="events",
    ),
    Metric(
        "zaroz_events_pending", Kind.GAUGE,
        "Events received ahead of a gap, waiting for the missing seqs.",
        _W, group="events",
    ),
    # The events route tailer.
    Metric(
        "zaroz_route_head_seq", Kind.GAUGE,
        "Newest seq in the workload's log, as reported by the events route.",
        _W, group="route",
    ),
    Metric(
        "zaroz_route_requests_total", Kind.COUNTER,
        "Requests to the events route by result: HTTP status (other codes by class, e.g. 4xx), "
        "or timeout, connection, truncated, invalid_body, token (token file unreadable).",
        ("workload", "result"), group="route",
    ),
    Metric(
        "zaroz_route_cursor_expired_total", Kind.COUNTER,
        "410 cursor_expired answers: the route no longer held the events after the cursor.",
        _W, group="route",
    ),
    Metric(
        "zaroz_route_caught_up", Kind.GAUGE,
        "1 once the tailer has applied the route's head_seq at least once, else 0.",
        _W, group="route",
    ),
    Metric(
        "zaroz_route_last_success_timestamp_seconds", Kind.GAUGE,
        "Unix time of the last successful request to the events route.",
        _W, unit="seconds", group="route",
    ),
    Metric(
        "zaroz_route_workloads", Kind.GAUGE,
        "Workloads being tailed.",
        (), group="route",
    ),
    Metric(
        "zaroz_route_discovery_total", Kind.COUNTER,
        "Workload list requests by result (ok or error).",
        ("result",), group="route",
    ),
    # UnitSignals (cluster state, exporter clock). Per-UnitSignal series carry _US labels.
    Metric(
        "zaroz_unitsignal_generation_lag", Kind.GAUGE,
        "spec.generation - status.observedGeneration (0 when caught up; a missing status "
        "counts as observedGeneration 0).",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_generation_lag_seconds", Kind.GAUGE,
        "How long the oldest generation not yet observed has waited (0 when caught up).",
        _US, unit="seconds", group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_generation_observe_seconds", Kind.HISTOGRAM,
        "Time from a generation appearing (watch, or the spec's managedFields time when it "
        "appeared before the exporter saw it) to status.observedGeneration reaching it.",
        _W, OBSERVE_BUCKETS, "seconds", "cluster",
    ),
    Metric(
        "zaroz_unitsignal_ready_seconds", Kind.HISTOGRAM,
        "Cluster clock: metadata.creationTimestamp (API server, 1 s precision) to "
        "status.signalledReady (agent clock), once per UnitSignal.",
        _W, READY_BUCKETS, "seconds", "cluster",
    ),
    Metric(
        "zaroz_unitsignal_allocation_ack_seconds", Kind.HISTOGRAM,
        "Cluster clock: spec.allocation.allocatedAt (or when the exporter first saw the "
        "allocation) to the exporter seeing status.allocationAck equal to its id.",
        _W, ACK_BUCKETS, "seconds", "cluster",
    ),
    Metric(
        "zaroz_unitsignal_info", Kind.GAUGE,
        "One per UnitSignal: its unit id, key and agent version; always 1.",
        (*_US, "unit_id", "key", "agent_version"), group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_labels", Kind.GAUGE,
        "The UnitSignal's Kubernetes labels named in --unitsignal-labels-allowlist, as "
        "label_<name>; always 1. Absent when the allowlist is empty.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_ready", Kind.GAUGE,
        "1 when status.signalledReady is set, else 0.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_accepting", Kind.GAUGE,
        "1 when status.accepting is true, else 0.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_activity", Kind.GAUGE,
        "The unit's status.activity (idle, busy, or none); always 1.",
        (*_US, "activity"), group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_draining", Kind.GAUGE,
        "1 with the reason when spec.draining is set; 0 with reason none otherwise.",
        (*_US, "reason"), group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_allocation_pending", Kind.GAUGE,
        "1 when spec.allocation is set and status.allocationAck is not its id, else 0.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_status_seq", Kind.GAUGE,
        "status.seq: monotonic per agent start.",
        _US, group="cluster", per_object=True, opt_in=True,
    ),
    Metric(
        "zaroz_unitsignal_spec_valid", Kind.GAUGE,
        "1 when the spec passes unit-signal-spec.schema.json, else 0.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_status_valid", Kind.GAUGE,
        "0 when a status is present and fails unit-signal-status.schema.json, else 1.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_unitsignal_generation_stuck_invalid_spec", Kind.GAUGE,
        "1 when a generation is waiting and the spec is invalid: the agent refuses invalid "
        "specs, so that generation will never be observed.",
        _US, group="cluster", per_object=True,
    ),
    Metric(
        "zaroz_workload_unitsignals", Kind.GAUGE,
        "UnitSignals by phase: starting, ready, allocated, draining.",
        ("workload", "phase"), group="cluster",
    ),
    Metric(
        "zaroz_workload_unitsignal_oldest_phase_seconds", Kind.GAUGE,
        "How long the UnitSignal longest in each phase has been in it (0 when none).",
        ("workload", "phase"), unit="seconds", group="cluster",
    ),
    Metric(
        "zaroz_unitsignal_conformance_violations_total", Kind.COUNTER,
        "Contract violations by rule: spec_schema, status_schema, "
        "observed_generation_regressed, observed_generation_ahead, unknown_allocation_ack, "
        "agent_restart (status.seq went back), out_of_range (a generation or status.seq beyond "
        "64-bit integers, or a time outside 1970-2262, read as absent).",
        ("workload", "rule"), group="cluster",
    ),
    Metric(
        "zaroz_unitsignal_clock_skew_total", Kind.COUNTER,
        "Cluster-clock intervals not observed because their end came before their start.",
        ("workload", "measurement"), group="cluster",
    ),
    # Kubernetes list/watch
    Metric(
        "zaroz_kube_requests_total", Kind.COUNTER,
        "LIST page and WATCH requests to the API server by verb (list, watch) and result: HTTP "
        "status (other codes by class, e.g. 4xx), or timeout, connection, truncated, "
        "invalid_body, credentials (none could be had; not sent). scope is the namespace, or * "
        "for all namespaces.",
        ("scope", "verb", "result"), group="kube",
    ),
    Metric(
        "zaroz_kube_failures_total", Kind.COUNTER,
        "Failed LIST pages and watches by verb and reason: a refused request (its result) or a "
        "stream that broke (timeout, connection, truncated, invalid_body, 410, or the status of "
        "a watch ERROR event).",
        ("scope", "verb", "reason"), group="kube",
    ),
    Metric(
        "zaroz_kube_relists_total", Kind.COUNTER,
        "Full LISTs (paginated, or a streaming list) started, by reason: initial, expired (410: "
        "the watch's resourceVersion was compacted), error (the watch was refused for another "
        "reason).",
        ("scope", "reason"), group="kube",
    ),
    Metric(
        "zaroz_kube_list_mode", Kind.GAUGE,
        "How the reflector's last full LIST was made: 1 for its mode, 0 for the other. "
        "watch-list: one watch streaming the objects (sendInitialEvents, where the API server "
        "offers it); paginated: LIST pages (a server that refuses or ignores the streaming "
        "list, or --kube-watch-list off). Both 0 before the first.",
        ("scope", "mode"), group="kube",
    ),
    Metric(
        "zaroz_kube_objects", Kind.GAUGE,
        "Objects the reflector holds (as of the last list and the watch events since).",
        ("scope",), group="kube",
    ),
    Metric(
        "zaroz_kube_synced", Kind.GAUGE,
        "1 once the reflector's first full LIST has completed, else 0.",
        ("scope",), group="kube",
    ),
    Metric(
        "zaroz_kube_objects_decoded_total", Kind.COUNTER,
        "UnitSignals received (LIST items and watch events) by how far they were decoded: "
        "metadata (another shard's: dropped on its labels and namespace, spec and status never "
        "decoded) or object (this shard's, given to the model).",
        ("scope", "depth"), group="kube",
    ),
    Metric(
        "zaroz_kube_watch_events_total", Kind.COUNTER,
        "Watch events received by type: ADDED, MODIFIED, DELETED, BOOKMARK, ERROR, unknown (a "
        "streaming list's initial ADDED events are its list, not counted here).",
        ("scope", "type"), group="kube",
    ),
    Metric(
        "zaroz_kube_last_watch_event_timestamp_seconds", Kind.GAUGE,
        "Unix time of the last watch event (bookmarks included) the reflector received.",
        ("scope",), unit="seconds", group="kube",
    ),
    # Webhooks
    Metric(
        "zaroz_webhook_deliveries_total", Kind.COUNTER,
        "Webhook deliveries by result: accepted, duplicate (the platform redelivered it), "
        "refetched (the route gave it first), ping, invalid (signed but failing "
        "the schema), ignored (workload not tailed), or refused: cross_workload (an event id "
        "already applied under another workload: a captured delivery replayed), "
        "missing_signature, "
        "bad_signature, stale_timestamp, future_timestamp, no_secret, too_large, "
        "unsupported_media_type, malformed_json, missing_workload, checkpoint_failed (applied, "
        "but the checkpoint that would hold it failed: answered 503 so that the platform "
        "redelivers). No workload label: a refused "
        "delivery's workload header cannot be trusted.",
        ("result",), group="webhook",
    ),
    Metric(
        "zaroz_webhook_backfills_total", Kind.COUNTER,
        "Route fetches asked for by the webhook intake, by reason: gap (deliveries waited behind "
        "a missing seq longer than the grace) or ping (the webhook's cursor was ahead).",
        ("workload", "reason"), group="webhook",
    ),
    Metric(
        "zaroz_webhook_pings_total", Kind.COUNTER,
        "webhook.ping deliveries (the webhook's cursor; not log events, so not in "
        "zaroz_events_total).",
        _W, group="webhook",
    ),
    Metric(
        "zaroz_webhook_cursor", Kind.GAUGE,
        "seq of the workload's latest webhook.ping: the last seq the webhook says it delivered.",
        _W, group="webhook",
    ),
    Metric(
        "zaroz_webhook_last_delivery_timestamp_seconds", Kind.GAUGE,
        "Unix time of the workload's last signed webhook delivery.",
        _W, unit="seconds", group="webhook",
    ),
    Metric(
        "zaroz_webhook_secrets", Kind.GAUGE,
        "Webhook secrets currently accepted (2 during a rotation; 0 refuses every delivery).",
        (), group="webhook",
    ),
    # Checkpoints
    Metric(
        "zaroz_checkpoint_saves_total", Kind.COUNTER,
        "Checkpoint writes (at scrape time, periodic, at shutdown) by result: written, unchanged "
        "(nothing to write), error (a scrape is then refused so nothing unsaved is exposed). "
        "Counts this process's writes: not restored from the checkpoint.",
        ("result",), group="webhook",
    ),
    Metric(
        "zaroz_checkpoint_last_save_timestamp_seconds", Kind.GAUGE,
        "Unix time of the last checkpoint that wrote rows (a save with nothing changed does not "
        "move it: see zaroz_checkpoint_last_success_timestamp_seconds); 0 before the first.",
        (), unit="seconds", group="webhook",
    ),
    Metric(
        "zaroz_checkpoint_last_success_timestamp_seconds", Kind.GAUGE,
        "Unix time of the last save that succeeded, written or unchanged: the state dir held "
        "everything applied until then. 0 before this process's first. A scrape shows the one "
        "before its own save (it is sent once that save is durable).",
        (), unit="seconds", group="webhook",
    ),
    Metric(
        "zaroz_checkpoint_last_save_duration_seconds", Kind.GAUGE,
        "Time the last checkpoint write took (collect what changed, write it, commit with fsync).",
        (), unit="seconds", group="webhook",
    ),
    Metric(
        "zaroz_checkpoint_bytes", Kind.GAUGE,
        "Bytes of the rows the last checkpoint wrote: only what changed since the one before (the "
        "first after a start without a checkpoint writes everything). The disk writes more, in "
        "whole database pages.",
        (), group="webhook",
    ),
    # Traces (OTLP), exporter-wide; absent samples when traces are off.
    Metric(
        "zaroz_traces_spans_total", Kind.COUNTER,
        "Spans ended and queued for OTLP export (unit lifecycles, event clock); each once, also "
        "across a restart (spans sent again count in zaroz_traces_spans_resent_total).",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_spans_exported_total", Kind.COUNTER,
        "Spans the OTLP receiver accepted. With --state-dir, each span once (by the export mark, "
        "exact across a restart; a span the receiver accepted just before a kill and got again "
        "after it counts once).",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_spans_dropped_total", Kind.COUNTER,
        "Spans never sent: with --state-dir, only spans ended while --otlp-max-pending-spans "
        "waited for the receiver (logged); without, the export queue was full "
        "(--otlp-max-queue-size) or they were still queued at shutdown.",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_export_failures_total", Kind.COUNTER,
        "OTLP export requests (batches of spans) that failed after the exporter's retries. With "
        "--state-dir a failed batch is tried again until accepted: every attempt counts.",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_spans_resent_total", Kind.COUNTER,
        "Spans sent again at a start with --state-dir: released before a stop and not known to "
        "be accepted (same ids; a receiver may have them already).",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_spans_waiting", Kind.GAUGE,
        "Spans ended and not yet accepted by the OTLP receiver: with --state-dir, held for the "
        "next checkpoint or waiting for the receiver (bounded by --otlp-max-pending-spans); "
        "without, in the export queue.",
        (), group="traces",
    ),
    Metric(
        "zaroz_traces_units_tracked", Kind.GAUGE,
        "Units with an open trace (root span not yet ended).",
        (), group="traces",
    ),
    # The exporter itself.
    Metric(
        "zaroz_exporter_series", Kind.GAUGE,
        "Series in the exposition at the previous scrape.",
        (), group="exporter",
    ),
    Metric(
        "zaroz_exporter_last_scrape_duration_seconds", Kind.GAUGE,
        "Time the previous scrape took to render and send.",
        (), unit="seconds", group="exporter",
    ),
    Metric(
        "zaroz_exporter_source_series", Kind.GAUGE,
        "Series in the exposition at the previous scrape, by source: the group of the families "
        "(lifecycle, events, route, cluster, kube, traces, webhook, exporter), or process for "
        "the process_* and python_* families.",
        ("source",), group="exporter",
    ),
    Metric(
        "zaroz_exporter_source_render_seconds", Kind.GAUGE,
        "Time the previous scrape spent rendering each source's families (see "
        "zaroz_exporter_source_series).",
        ("source",), unit="seconds", group="exporter",
    ),
    Metric(
        "zaroz_exporter_last_scrape_bytes", Kind.GAUGE,
        "Uncompressed size of the previous scrape's exposition.",
        (), unit="bytes", group="exporter",
    ),
    Metric(
        "zaroz_exporter_shard", Kind.GAUGE,
        "This instance's shard ordinal (0-based); each workload belongs to one shard.",
        (), group="exporter",
    ),
    Metric(
        "zaroz_exporter_shards", Kind.GAUGE,
        "The configured number of shards (--total-shards).",
        (), group="exporter",
    ),
    Metric(
        "zaroz_exporter_workloads_dropped_total", Kind.COUNTER,
        "Workloads dropped with their state, series and stored rows, by reason: other_shard (a "
        "restored checkpoint held a workload another shard owns: the shard count or index "
        "changed), left_route (gone from the route's workload list for longer than "
        "--workload-retention). One seen again starts as new.",
        ("reason",), group="exporter",
    ),
    Metric(
        "zaroz_exporter_task_restarts_total", Kind.COUNTER,
        "Background loops (task: checkpoint, expire, collector, overview, kube) that died on an "
        "exception and were started again after a backoff; each is logged with its exception.",
        ("task",), group="exporter",
    ),
    Metric(
        "zaroz_exporter_otlp_metrics_exports_total", Kind.COUNTER,
        "OTLP metric exports (--otlp-metrics-endpoint) by result: success (every request "
        "accepted), failure (a request refused or unanswered after the client's retries; the "
        "next export carries every total again), checkpoint_failed (nothing sent).",
        ("result",), group="exporter",
    ),
    Metric(
        "zaroz_exporter_otlp_metrics_last_success_timestamp_seconds", Kind.GAUGE,
        "When the last OTLP metric export was accepted whole (0: not yet).",
        unit="seconds", group="exporter",
    ),
    Metric(
        "zaroz_exporter_otlp_metrics_points", Kind.GAUGE,
        "Data points in the last OTLP metric export.",
        group="exporter",
    ),
    Metric(
        "zaroz_exporter_build_info", Kind.INFO,
        "Exporter build information; always 1.",
        ("version", "python_version"), group="exporter",
    ),
)

def _by_name(metrics: tuple[Metric, ...]) -> dict[str, Metric]:
    """Name -> metric; a name declared twice fails at import instead of one hiding the other."""
    out: dict[str, Metric] = {}
    for m in metrics:
        if m.name in out:
            raise ValueError(f"metric {m.name} is declared twice in the catalog")
        out[m.name] = m
    return out


BY_NAME: dict[str, Metric] = _by_name(METRICS)


def get(name: str) -> Metric:
    return BY_NAME[name]


def sample_names() -> set[str]:
    """Every sample name the exposition can contain, for dashboards and alert checks."""
    names: set[str] = set()
    for m in METRICS:
        if m.kind is Kind.HISTOGRAM:
            names.update(f"{m.name}{s}" for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(m.name)
    return names
