"""Units overview: is each workload getting the units it asked for, and how fast?

Read top to bottom the way an incident is: how many units and in which phase, how long they take
to become ready, whether allocations reach them, how drains and startups end, what the event log
is doing.
"""

from __future__ import annotations

from grafanalib import core as g

from alerts import recording
from exporter import vocabulary

from . import lib
from .lib import WORKLOAD, one_of, rate, rate_by, select, target

UID = "zaroz-units"


def build() -> g.Dashboard:
    """The Units overview dashboard."""
    w = {"workload": WORKLOAD}
    trace = [lib.trace_link()]
    units = [
        (
            lib.timeseries(
                "UnitSignals by phase",
                "UnitSignals in the cluster per workload and phase (starting, ready, allocated, "
                "draining), as the exporter's watch sees them.",
                [
                    target(
                        f"sum by (workload, phase) ({select('zaroz_workload_unitsignals', **w)})",
                        "{{workload}} {{phase}}",
                    )
                ],
                "short",
                stacked=True,
            ),
            12,
        ),
        (
            lib.timeseries(
                "Desired vs actual units",
                "Desired: the latest units.scaled event. UnitSignals: objects in the selected "
                "namespaces. Tracked: units the event log says exist. A lasting gap between "
                "desired and the others is a scale-up or scale-down that is not happening.",
                [
                    target(
                        f"max by (workload) ({select('zaroz_workload_desired_units', **w)})",
                        "{{workload}} desired",
                    ),
                    target(
                        "count by (workload) ("
                        + select("zaroz_unitsignal_info", workload=WORKLOAD,
                                 namespace=lib.NAMESPACE)
                        + ")",
                        "{{workload}} UnitSignals",
                    ),
                    target(
                        f"sum by (workload) ({select('zaroz_workload_units_tracked', **w)})",
                        "{{workload}} tracked (event log)",
                    ),
                ],
                "short",
            ),
            12,
        ),
    ]
    readiness = [
        (
            lib.timeseries(
                "Readiness p50 / p95 / p99",
                "Time from unit.created to the first unit.ready (event clock), from the "
                f"recording rules over {recording.WINDOW}. The heatmap beside it has the "
                "exemplars (one unit's trace per bucket).",
                lib.quantile_targets(recording.READY, **w),
                "s",
                links=trace,
            ),
            12,
        ),
        (
            lib.heatmap(
                "Readiness distribution",
                "Units becoming ready per readiness bucket and interval, all selected "
                "workloads. Exemplar dots open that unit's trace in the tracing datasource.",
                recording.READY,
                **w,
            ),
            12,
        ),
    ]
    allocations = [
        (
            lib.timeseries(
                "Allocation ack lag p50 / p95 / p99",
                "Time from unit.allocated to the unit's unit.allocation_delivered (event clock), "
                f"from the recording rules over {recording.WINDOW}.",
                lib.quantile_targets(recording.ALLOCATION_ACK, **w),
                "s",
                links=trace,
            ),
            8,
        ),
        (
            lib.heatmap(
                "Allocation ack lag distribution",
                "Allocations delivered per ack-lag bucket and interval, with exemplars linking "
                "to the unit's trace.",
                recording.ALLOCATION_ACK,
                **w,
            ),
            8,
        ),
        (
            lib.timeseries(
                "Undelivered and abandoned allocations",
                "Allocations per second that never reached the unit: undelivered "
                "(unit.allocation_undelivered) or abandoned (the unit stopped, exited, failed "
                "or was destroyed with the allocation pending).",
                [
                    target(
                        "sum by (workload, outcome) ("
                        + rate(
                            select(
                                "zaroz_unit_allocations_total",
                                workload=WORKLOAD,
                                outcome=one_of(
                                    ["undelivered", "abandoned"], vocabulary.ALLOCATION_OUTCOMES
                                ),
                            )
                        )
                        + ")",
                        "{{workload}} {{outcome}}",
                    )
                ],
                "cps",
            ),
            8,
        ),
    ]
    lifecycle = [
        (
            lib.timeseries(
                "Drain duration p50 / p95 by reason",
                "Time from unit.draining to the unit stopping, exiting, failing or being "
                "destroyed (event clock), per drain reason. Computed from buckets (no recording "
                "rule keeps the reason), with exemplars linking to the unit's trace.",
                [
                    target(
                        lib.quantile_raw(q, recording.DRAIN, ("workload", "reason"), **w),
                        f"{{{{workload}}}} {{{{reason}}}} {key}",
                        exemplar=True,
                    )
                    for key, q in (("p50", 0.5), ("p95", 0.95))
                ],
                "s",
                links=trace,
            ),
            8,
        ),
        (
            lib.timeseries(
                "Startup outcomes",
                "Startups ending per second by outcome: ready, or failed / destroyed before the "
                "first unit.ready.",
                [
                    rate_by(("workload", "outcome"), "zaroz_unit_startups_total", **w)
                ],
                "cps",
                stacked=True,
            ),
            8,
        ),
        (
            lib.timeseries(
                "Events by type",
                "Events applied per second, by event type (unknown types share `unknown`).",
                [
                    rate_by(("type",), "zaroz_events_total", **w)
                ],
                "cps",
                stacked=True,
            ),
            8,
        ),
    ]
    return lib.dashboard(
        "zaroz / Units overview",
        UID,
        "Per workload: units by phase, desired vs actual, readiness, allocation delivery, "
        "drains, startups and the event rate. Generated by `python -m dashboards`; do not edit.",
        [
            ("Units", units),
            ("Readiness", readiness),
            ("Allocations", allocations),
            ("Drains, startups, events", lifecycle),
        ],
        workload_source="zaroz_events_total",
    )
