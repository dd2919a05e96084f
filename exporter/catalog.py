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

# Bounded label values.
DRAIN_REASONS = ("stop", "destroy", "replace", "scale_down")
ALLOCATION_OUTCOMES = ("delivered", "undelivered", "superseded", "abandoned")
STARTUP_OUTCOMES = ("ready", "failed", "destroyed")
INVALID_REASONS = ("json", "schema")
SKEW_MEASUREMENTS = ("ready", "allocation_ack", "drain")
EVENT_TYPES = (
    "unit.created",
    "unit.starting",
    "unit.ready",
    "unit.accepting",
    "unit.not_accepting",
    "unit.allocated",
    "unit.allocation_delivered",
    "unit.allocation_undelivered",
    "unit.idle",
    "unit.busy",
    "unit.draining",
    "unit.stopped",
    "unit.exited",
    "unit.failed",
    "unit.destroyed",
    "units.scaled",
    "webhook.ping",
)
UNKNOWN = "unknown"
OTHER = "other"
# Exit codes kept as label values; every other code is `other`.
EXIT_CODES = ("0", "1", "2", "126", "127", "130", "134", "137", "139", "143")

_W = ("workload",)

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
        "Events ignored because their seq was already applied.",
        _W, group="events",
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
        "Events not applied: not JSON (reason json) or failing event.schema.json (reason schema).",
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
        "zaroz_exporter_last_scrape_bytes", Kind.GAUGE,
        "Uncompressed size of the previous scrape's exposition.",
        (), unit="bytes", group="exporter",
    ),
    Metric(
        "zaroz_exporter_build_info", Kind.INFO,
        "Exporter build information; always 1.",
        ("version", "python_version"), group="exporter",
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


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
