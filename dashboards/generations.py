"""Generations and agents: do unit agents keep up with their UnitSignal specs, and behave?

A spec generation the agent has not observed is a change (allocation, drain) the unit has not
acted on; the stuck table names the objects so an operator can look at them directly.
"""

from __future__ import annotations

from grafanalib import core as g

from alerts import recording
from exporter import vocabulary

from . import lib
from .lib import NAMESPACE, WORKLOAD, eq, rate, rate_by, select, target

UID = "zaroz-generations"


def build() -> g.Dashboard:
    """The Generations and agents dashboard."""
    w = {"workload": WORKLOAD}
    us = {"namespace": NAMESPACE, "workload": WORKLOAD}
    lagging = f"({select('zaroz_unitsignal_generation_lag', **us)} > 0)"
    on_obj = "on (namespace, unitsignal)"
    lag = [
        (
            lib.timeseries(
                "Generation lag (generations)",
                "Largest spec.generation - status.observedGeneration per workload: how many "
                "spec changes the slowest agent has not acknowledged yet (0 when caught up).",
                [
                    target(
                        "max by (workload) ("
                        + select("zaroz_unitsignal_generation_lag", **us)
                        + ")",
                        "{{workload}}",
                    )
                ],
                "short",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Generation lag (time)",
                "How long the oldest unobserved generation has waited, worst UnitSignal per "
                "workload (exporter clock).",
                [
                    target(
                        "max by (workload) ("
                        + select("zaroz_unitsignal_generation_lag_seconds", **us)
                        + ")",
                        "{{workload}}",
                    )
                ],
                "s",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Generation observe latency p50 / p95 / p99",
                "Time from a generation appearing to status.observedGeneration reaching it, "
                f"from the recording rules over {recording.WINDOW}.",
                lib.quantile_targets(recording.GENERATION_OBSERVE, **w),
                "s",
            ),
            8,
        ),
        (
            lib.table(
                "Stuck UnitSignals",
                "UnitSignals with an unobserved generation now: lag in generations and time, "
                "whether the spec is valid (an invalid spec is refused by the agent, so that "
                "generation will never be observed: fix the spec, not the agent).",
                [
                    target(lagging, refId="A"),
                    target(
                        f"{select('zaroz_unitsignal_generation_lag_seconds', **us)} "
                        f"and {on_obj} {lagging}",
                        refId="B",
                    ),
                    target(
                        f"{select('zaroz_unitsignal_spec_valid', **us)} and {on_obj} {lagging}",
                        refId="C",
                    ),
                ],
                {
                    "B": ("lag (time)", "s"),
                    "A": ("lag (generations)", "short"),
                    "C": ("spec valid", "none"),
                },
                mappings={
                    "C": [
                        {
                            "type": "value",
                            "options": {
                                "0": {"text": "no (never observed)", "color": "red"},
                                "1": {"text": "yes", "color": "green"},
                            },
                        }
                    ]
                },
            ),
            24,
        ),
    ]
    agents = [
        (
            lib.timeseries(
                "Conformance violations by rule",
                "Contract violations per second by rule (spec/status schema, observedGeneration "
                "regressed or ahead, unknown allocation ack, agent restart).",
                [
                    rate_by(("workload", "rule"),
                            "zaroz_unitsignal_conformance_violations_total", **w)
                ],
                "cps",
                stacked=True,
            ),
            8,
        ),
        (
            lib.timeseries(
                "Agent versions",
                "UnitSignals per agent version in the selected workloads and namespaces: a "
                "rollout shows as one version replacing another.",
                [
                    target(
                        "count by (agent_version) ("
                        + select("zaroz_unitsignal_info", **us)
                        + ")",
                        "{{agent_version}}",
                    )
                ],
                "short",
                stacked=True,
            ),
            8,
        ),
        (
            lib.timeseries(
                "Agent restarts",
                "Agent restarts per second (status.seq went back: the agent started again "
                "without the unit being recreated).",
                [
                    target(
                        "sum by (workload) ("
                        + rate(
                            select(
                                "zaroz_unitsignal_conformance_violations_total",
                                workload=WORKLOAD,
                                rule=eq("agent_restart", vocabulary.VIOLATION_RULES),
                            )
                        )
                        + ")",
                        "{{workload}}",
                    )
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Oldest UnitSignal per phase",
                "How long the UnitSignal longest in each phase has been there: a unit starting "
                "or draining for long is stuck.",
                [
                    target(
                        "max by (workload, phase) ("
                        + select("zaroz_workload_unitsignal_oldest_phase_seconds", **w)
                        + ")",
                        "{{workload}} {{phase}}",
                    )
                ],
                "s",
            ),
            12,
        ),
        (
            lib.timeseries(
                "Stuck on an invalid spec",
                "UnitSignals waiting on a generation whose spec fails the schema: the agent "
                "refuses it, so only a spec fix unblocks them.",
                [
                    target(
                        "sum by (workload) ("
                        + select("zaroz_unitsignal_generation_stuck_invalid_spec", **us)
                        + ")",
                        "{{workload}}",
                    )
                ],
                "short",
            ),
            12,
        ),
    ]
    return lib.dashboard(
        "zaroz / Generations and agents",
        UID,
        "UnitSignal generation lag and observe latency, the UnitSignals stuck now, contract "
        "violations, agent versions and restarts. Generated by `python -m dashboards`; do not "
        "edit.",
        [("Generations", lag), ("Agents", agents)],
        workload_source="zaroz_workload_unitsignals",
    )
