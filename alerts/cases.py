"""promtool unit tests of every alert, as data rendered to alerts/tests/*.yaml.

Each alert gets a test that shows it firing when it should, silent on a healthy neighbour, and
at the boundary of its `for`: silent at the last evaluation before `for` has elapsed since the
condition became true, firing at the first one after. Timings are written out in the comments
next to each case because they are the point of the test. Summaries and runbook URLs come from
the rule definitions; labels and rendered descriptions are written by hand, so a template
mistake shows up as a failing test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from alerts import alerting, recording
from alerts.config import Config

US1 = {"namespace": "ns", "unitsignal": "us-1", "workload": "wl"}
US2 = {"namespace": "ns", "unitsignal": "us-2", "workload": "wl"}


def sel(name: str, **labels: str) -> str:
    """A series in promtool's notation, e.g. `x{workload="wl"}`."""
    if not labels:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


@dataclass
class Fire:
    """An expected firing alert: its labels besides alertname/severity, and its description."""

    labels: dict[str, str]
    description: str
    severity: str | None = None  # defaults to the alert's


@dataclass
class Case:
    """One promtool test: input series and, per eval time, the alerts firing (empty: silent)."""

    name: str
    alert: str
    series: list[tuple[str, str]]
    evals: list[tuple[str, list[Fire]]]
    interval: str = "1m"
    exprs: list[tuple[str, str, list[tuple[dict[str, str], float]]]] = field(default_factory=list)


def _hist(name: str, labels: dict[str, str], buckets: dict[str, str]) -> list[tuple[str, str]]:
    """Bucket series (le -> values) plus `_count` taken from the +Inf bucket."""
    out = [(sel(f"{name}_bucket", **labels, le=le), v) for le, v in buckets.items()]
    out.append((sel(f"{name}_count", **labels), buckets["+Inf"]))
    return out


_MINUTES = {"5m": 5, "30m": 30, "1h": 60, "2h": 120, "6h": 360, "1d": 1440, "3d": 4320}


# Input series of a histogram from promtool value strings of its good (<= SLO threshold) and
# total observation counts: (histogram, labels, good, total) -> (series, values) pairs.
HistSeries = Callable[[str, dict[str, str], str, str], list[tuple[str, str]]]


def _burn_cases(config: Config, slo_key: str, alert: str, what: str,
                hist: HistSeries | None = None) -> list[Case]:
    """The burn-rate cases of one SLO; `hist` writes its histogram (default: classic buckets,
    the threshold's `le` bucket holding the good ones)."""
    slo = config.slo(slo_key)
    h = slo.histogram
    le = recording.le_value(slo.threshold)
    budget = slo.error_budget
    classic = hist is None
    if hist is None:
        def hist(h: str, labels: dict[str, str], good: str, total: str) -> list[tuple[str, str]]:
            return _hist(h, labels, {le: good, "+Inf": total})

    def fire(long: str, short: str, factor: str, value: str, sev: str, t: int) -> Fire:
        # Observations in the long window at minute t: 1000 a minute since 0m (the counter's
        # extrapolation stops at its zero point, so a window reaching before 0m counts t min).
        measured = per_min * min(t, _MINUTES[long])
        if config.native_histograms and t < _MINUTES[long]:
            # increase() of a native histogram extrapolates half a step before its first
            # sample: Prometheus stops at the zero point of float counters only.
            measured += per_min // 2
        return Fire(
            {"workload": "wl", "long": long, "short": short},
            f"Workload wl: {value} of {what.lower()} took longer than {le} s over the last "
            f"{long} (and the last {short}), out of {measured} measured in the last {long}: "
            f"{factor}x the rate the {slo.objective:.4g} "
            f"objective allows (threshold {float(factor) * budget * 100:.4g}%).",
            sev,
        )

    def page1(v: str, t: int) -> Fire:
        return fire("1h", "5m", "14.4", v, "critical", t)

    def page6(v: str, t: int) -> Fire:
        return fire("6h", "30m", "6", v, "critical", t)

    def tick1(v: str, t: int) -> Fire:
        return fire("1d", "2h", "3", v, "warning", t)

    def tick3(v: str, t: int) -> Fire:
        return fire("3d", "6h", "1", v, "warning", t)

    # Errors as a multiple of the budget: 20x for the fast burn, 2x for the slow one.
    fast_bad, slow_bad = 20 * budget, 2 * budget
    assert fast_bad < 1, "objective too loose for this test's fast burn"
    per_min = 1000
    fast_good = round(per_min * (1 - fast_bad))
    slow_good = round(per_min * (1 - slow_bad))
    fast_pct = f"{fast_bad * 100:.4g}%"
    slow_pct = f"{slow_bad * 100:.4g}%"
    ok = {"workload": "ok"}
    healthy = hist(h, ok, f"0+{per_min}x200", f"0+{per_min}x200")
    stored = []
    if classic:
        # The bucket's `le` as Prometheus 3 stores it (`60.0`, `1.0`) whatever the exporter
        # wrote: the ratio reads it as well as the exposition's own spelling.
        stored.append(Case(
            f"{alert} fast burn with le as Prometheus 3 stores it",
            alert,
            _hist(h, {"workload": "wl"}, {recording.om_float(slo.threshold): f"0+{fast_good}x5",
                                          "+Inf": f"0+{per_min}x5"}),
            [("2m", []), ("3m", [page1(fast_pct, 3)])],
        ))
    return [
        *stored,
        Case(
            # The ratio is 20x budget from 1m (first rate). Pairs fire after their `for`:
            # 1h/5m at 1m+2m, 6h/30m at 1m+15m, 1d/2h at 1m+1h, 3d/6h at 1m+3h.
            f"{alert} fast burn pages, then tickets",
            alert,
            hist(h, {"workload": "wl"}, f"0+{fast_good}x200", f"0+{per_min}x200")
            + healthy,
            [
                ("2m", []),
                ("3m", [page1(fast_pct, 3)]),
                ("15m", [page1(fast_pct, 15)]),
                ("16m", [page1(fast_pct, 16), page6(fast_pct, 16)]),
                ("60m", [page1(fast_pct, 60), page6(fast_pct, 60)]),
                ("61m", [page1(fast_pct, 61), page6(fast_pct, 61), tick1(fast_pct, 61)]),
                ("180m", [page1(fast_pct, 180), page6(fast_pct, 180), tick1(fast_pct, 180)]),
                ("181m", [page1(fast_pct, 181), page6(fast_pct, 181), tick1(fast_pct, 181),
                          tick3(fast_pct, 181)]),
            ],
        ),
        Case(
            # 2x budget: only the 3d/6h pair (factor 1) burns; it fires at 1m+3h, never a page.
            f"{alert} slow burn only tickets",
            alert,
            hist(h, {"workload": "wl"}, f"0+{slow_good}x200", f"0+{per_min}x200")
            + healthy,
            [("30m", []), ("180m", []), ("181m", [tick3(slow_pct, 181)])],
        ),
        Case(
            # A fast burn for 10 minutes, then none: at 20m the 5m window is clean so the 1h/5m
            # page has resolved although the 1h ratio (10 bad minutes of 20) is still high; the
            # 6h/30m page (firing since 16m) holds until its 30m window is clean too.
            f"{alert} resolves when the burn stops",
            alert,
            hist(h, {"workload": "wl"},
                 f"0+{fast_good}x10 {10 * fast_good + per_min}+{per_min}x29",
                 f"0+{per_min}x40"),
            [
                ("10m", [page1(fast_pct, 10)]),
                ("20m", [page6(f"{fast_bad * 50:.4g}%", 20)]),
            ],
        ),
    ]


def cases(config: Config) -> dict[str, list[Case]]:
    """Test file stem -> cases. Thresholds are read from `config` where the series depend on them
    only through the SLO cases; the other cases assume the default thresholds (a test checks)."""
    p = alerting.PREFIX
    return {
        "clusters": _cluster_cases(config),
        "unitsignals": [
            Case(
                # us-1's lag passes 300 s at 6m (360); for 5m: silent at 10m, firing at 11m.
                # us-2 waits as long but on an invalid spec: the InvalidSpec alert covers it.
                f"{p}GenerationStuck",
                f"{p}GenerationStuck",
                [
                    (sel("zaroz_unitsignal_generation_lag_seconds", **US1), "0+60x30"),
                    (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **US1), "0x30"),
                    (sel("zaroz_unitsignal_generation_lag_seconds", **US2), "0+60x30"),
                    (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **US2), "1x30"),
                ],
                [
                    ("5m", []),
                    ("10m", []),
                    ("11m", [Fire(US1, _stuck_desc("us-1", "11m 0s", 1))]),
                ],
            ),
            Case(
                # Stuck on an invalid spec from 0m; for 5m: silent at 4m, firing at 5m.
                f"{p}GenerationStuckInvalidSpec",
                f"{p}GenerationStuckInvalidSpec",
                [
                    (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **US1), "0x30"),
                    (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **US2), "1x30"),
                ],
                [
                    ("4m", []),
                    (
                        "5m",
                        [
                            Fire(
                                US2,
                                "UnitSignal ns/us-2 (workload wl) has a pending generation "
                                "whose spec fails the schema; the agent refuses it, so the unit "
                                "will not follow its spec. UnitSignals of the workload stuck on "
                                "an invalid spec: 1.",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # us-2's spec turns invalid at 2m; for 5m: silent at 6m, firing at 7m.
                f"{p}UnitSignalSpecInvalid",
                f"{p}UnitSignalSpecInvalid",
                [
                    (sel("zaroz_unitsignal_spec_valid", **US1), "1x30"),
                    (sel("zaroz_unitsignal_spec_valid", **US2), "1 1 0x30"),
                ],
                [
                    ("6m", []),
                    (
                        "7m",
                        [
                            Fire(
                                US2,
                                "UnitSignal ns/us-2 (workload wl) has a spec that fails "
                                "unit-signal-spec.schema.json.",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # One violation at 3m: fires at once (no `for`), until it leaves the 15m window.
                f"{p}UnitSignalConformanceViolations",
                f"{p}UnitSignalConformanceViolations",
                [
                    (
                        sel("zaroz_unitsignal_conformance_violations_total", workload="wl",
                            rule="agent_restart"),
                        "0 0 0 1x30",
                    ),
                    (
                        sel("zaroz_unitsignal_conformance_violations_total", workload="ok",
                            rule="agent_restart"),
                        "0x30",
                    ),
                ],
                [
                    ("2m", []),
                    (
                        "3m",
                        [
                            Fire(
                                {"workload": "wl", "rule": "agent_restart"},
                                "Workload wl: 1 violations of rule agent_restart in the last "
                                "15 minutes.",
                            )
                        ],
                    ),
                    ("19m", []),
                ],
            ),
        ],
        "lifecycle": [
            Case(
                # Every unit of wl readies in (300, 600] s: p95 585 s from 1m; for 15m: silent at
                # 15m, firing at 16m. Workload ok readies within 60 s.
                f"{p}UnitReadinessSlow",
                f"{p}UnitReadinessSlow",
                _hist(
                    recording.READY,
                    {"workload": "wl"},
                    {"300": "0x30", "600": "0+1x30", "+Inf": "0+1x30"},
                )
                + _hist(
                    recording.READY,
                    {"workload": "ok"},
                    {"60": "0+1x30", "600": "0+1x30", "+Inf": "0+1x30"},
                ),
                [
                    ("15m", []),
                    (
                        "16m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: 95% of units became ready within 9m 45s over "
                                "the last 5 minutes (threshold 5m 0s).",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # Acks in (5, 10] s: p95 9.75 s from 1m; for 15m: silent at 15m, firing at 16m.
                f"{p}AllocationAckSlow",
                f"{p}AllocationAckSlow",
                _hist(
                    recording.ALLOCATION_ACK,
                    {"workload": "wl"},
                    {"5": "0x30", "10": "0+1x30", "+Inf": "0+1x30"},
                )
                + _hist(
                    recording.ALLOCATION_ACK,
                    {"workload": "ok"},
                    {"0.5": "0+1x30", "5": "0+1x30", "+Inf": "0+1x30"},
                ),
                [
                    ("15m", []),
                    (
                        "16m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: the 95th percentile allocation ack time is 9.75s "
                                "over the last 5 minutes (threshold 5s).",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # 1 in 4 allocations undelivered from 1m; for 10m: silent at 10m, firing at
                # 11m. Workload ok has no undelivered series at all and must read 0, not fire.
                f"{p}AllocationsUndelivered",
                f"{p}AllocationsUndelivered",
                [
                    (sel("zaroz_unit_allocations_total", workload="wl", outcome="delivered"),
                     "0+3x30"),
                    (sel("zaroz_unit_allocations_total", workload="wl", outcome="undelivered"),
                     "0+1x30"),
                    (sel("zaroz_unit_allocations_total", workload="ok", outcome="delivered"),
                     "0+9x30"),
                ],
                [
                    ("10m", []),
                    (
                        "11m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: 25% of allocations ended undelivered over the "
                                "last 5 minutes (threshold 5%), 5 allocations.",
                            )
                        ],
                    ),
                ],
                exprs=[
                    (
                        recording.ALLOCATIONS_UNDELIVERED_RATIO,
                        "11m",
                        [({"workload": "ok"}, 0.0), ({"workload": "wl"}, 0.25)],
                    ),
                ],
            ),
            Case(
                # wl: a drain in progress passes 1800 s at 6m; for 15m: firing at 21m.
                # wl-b: finished drains with p95 3510 s from 1m; for 15m: firing at 16m.
                f"{p}DrainTooLong",
                f"{p}DrainTooLong",
                [
                    (
                        sel("zaroz_workload_unitsignal_oldest_phase_seconds", workload="wl",
                            phase="draining"),
                        "1500+60x40",
                    ),
                    (
                        sel("zaroz_workload_unitsignal_oldest_phase_seconds", workload="wl-b",
                            phase="draining"),
                        "0x40",
                    ),
                    *_hist(
                        recording.DRAIN,
                        {"workload": "wl-b", "reason": "stop"},
                        {"1800": "0x40", "3600": "0+1x40", "+Inf": "0+1x40"},
                    ),
                ],
                [
                    ("15m", []),
                    ("16m", [_drain("wl-b", "58m 30s")]),
                    ("20m", [_drain("wl-b", "58m 30s")]),
                    ("21m", [_drain("wl", "46m 0s"), _drain("wl-b", "58m 30s")]),
                ],
            ),
            Case(
                # 1 in 5 startups fails from 1m; for 15m: silent at 15m, firing at 16m.
                f"{p}UnitStartupsFailing",
                f"{p}UnitStartupsFailing",
                [
                    (sel("zaroz_unit_startups_total", workload="wl", outcome="ready"), "0+4x30"),
                    (sel("zaroz_unit_startups_total", workload="wl", outcome="failed"), "0+1x30"),
                    (sel("zaroz_unit_startups_total", workload="ok", outcome="ready"), "0+4x30"),
                ],
                [
                    ("15m", []),
                    (
                        "16m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: 20% of startups failed before the unit became "
                                "ready over the last 5 minutes (threshold 10%).",
                            )
                        ],
                    ),
                ],
            ),
        ],
        "slo": [
            *_burn_cases(config, "readiness", f"{p}ReadinessBudgetBurn", "Readiness"),
            *_burn_cases(config, "allocation_ack", f"{p}AllocationAckBudgetBurn",
                         "Allocation ack"),
        ],
        "events": [
            Case(
                # 3 seqs lost at 4m: fires at once, and stops once they leave the 15m window.
                f"{p}EventsMissing",
                f"{p}EventsMissing",
                [
                    (sel("zaroz_events_missing_total", workload="wl"), "0 0 0 0 3x30"),
                    (sel("zaroz_events_missing_total", workload="ok"), "0x30"),
                ],
                [
                    ("3m", []),
                    (
                        "4m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: 3 events were given up as lost in the last 15m; "
                                "measurements that needed them are missing.",
                            )
                        ],
                    ),
                    ("20m", []),
                ],
            ),
            Case(
                # The counter resets at 6m (an exporter that lost its state): a reset is no
                # loss, also while the sample before it is the window's first (2 at 20m: its
                # [15m] holds 3 then 0) or is just outside it (3 at 21m).
                f"{p}EventsMissing silent across a counter reset",
                f"{p}EventsMissing",
                [(sel("zaroz_events_missing_total", workload="wl"), "3x5 0x30")],
                [("6m", []), ("20m", []), ("21m", [])],
            ),
            Case(
                # Reset at 6m, then 2 seqs lost at 7m: counted from zero (no negative
                # increase), it fires at 7m (2.143: the 7 minutes of samples extrapolated half
                # an interval back, 7.5/7), and ends once the loss has left the window on both
                # majors (22m).
                f"{p}EventsMissing losses after a counter reset",
                f"{p}EventsMissing",
                [(sel("zaroz_events_missing_total", workload="wl"), "3x5 0 2x30")],
                [
                    ("6m", []),
                    ("7m", [Fire({"workload": "wl"},
                                 "Workload wl: 2.143 events were given up as lost in the "
                                 "last 15m; "
                                 "measurements that needed them are missing.")]),
                    ("22m", []),
                ],
            ),
            Case(
                # Head keeps moving; applied last moves at the 10m sample (9m: 190, 10m: 200).
                # Unchanged for a full 10m window at 20m; for 5m: silent at 24m, firing at 25m
                # (head 350, applied 200). At 19m Prometheus 3's left-open `[10m]` already
                # holds no change (the 9m sample is out), `offset 10m` (9m's 190) says it
                # moved. Workload idle is caught up and quiet: never fires.
                f"{p}EventTailStalled",
                f"{p}EventTailStalled",
                [
                    (sel("zaroz_route_head_seq", workload="wl"), "100+10x40"),
                    (sel("zaroz_events_last_seq", workload="wl"), "100+10x10 200x30"),
                    (sel("zaroz_route_head_seq", workload="idle"), "50x40"),
                    (sel("zaroz_events_last_seq", workload="idle"), "50x40"),
                ],
                [
                    ("24m", []),
                    (
                        "25m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: the events route is 150 events ahead and the "
                                "applied seq has not moved for 10m.",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # At 30 s scrapes the seq last moves at 10m30s (10m: 300, 10m30s: 310). At 20m
                # the 10m sample is exactly the `[10m]` range's start: Prometheus 2 counts it
                # (a change), 3 leaves it out (none), so `changes()` alone said "stalled" at
                # 20m on 3 and 21m on 2; with the `offset` sample (10m's 300) both say it from
                # 20m30s, the first evaluation at 21m; for 5m: silent at 25m, firing at 26m.
                f"{p}EventTailStalled a sample at the window's start",
                f"{p}EventTailStalled",
                [
                    (sel("zaroz_route_head_seq", workload="wl"), "100+10x80"),
                    (sel("zaroz_events_last_seq", workload="wl"), "100+10x21 310x60"),
                ],
                [
                    ("25m", []),
                    ("26m", [Fire({"workload": "wl"},
                                  "Workload wl: the events route is 310 events ahead and the "
                                  "applied seq has not moved for 10m.")]),
                ],
                interval="30s",
            ),
            Case(
                # The exporter stops at 15m: its series end with stale markers, the lag with them;
                # no stall is claimed for what is not scraped (ZarozExporterAbsent's case).
                f"{p}EventTailStalled silent once its series are stale",
                f"{p}EventTailStalled",
                [
                    (sel("zaroz_route_head_seq", workload="wl"), "100+10x15 stale"),
                    (sel("zaroz_events_last_seq", workload="wl"), "100x15 stale"),
                ],
                [("15m", [Fire({"workload": "wl"},
                               "Workload wl: the events route is 150 events ahead and the "
                               "applied seq has not moved for 10m.")]),
                 ("16m", []), ("30m", [])],
            ),
            Case(
                # Successes stop at 600 s; older than 300 s from 16m; for 5m: firing at 21m.
                f"{p}EventRouteFailing",
                f"{p}EventRouteFailing",
                [
                    (sel("zaroz_route_last_success_timestamp_seconds", workload="wl"),
                     "0+60x10 600x30"),
                    (sel("zaroz_route_last_success_timestamp_seconds", workload="ok"),
                     "0+60x40"),
                ],
                [
                    ("20m", []),
                    (
                        "21m",
                        [
                            Fire(
                                {"workload": "wl"},
                                "Workload wl: the last successful events route request was "
                                "11m 0s ago (threshold 5m 0s).",
                            )
                        ],
                    ),
                ],
            ),
        ],
        "kube": [
            Case(
                # 6 failures a minute from 0m: the 5m rate ramps up (6 x minutes / 300 s) and
                # passes 0.05/s at 3m; for 15m: silent at 17m, firing at 18m.
                f"{p}KubeWatchFailing",
                f"{p}KubeWatchFailing",
                [
                    (sel("zaroz_kube_failures_total", scope="*", verb="watch", reason="410"),
                     "0+6x30"),
                    (sel("zaroz_kube_failures_total", scope="ns", verb="watch", reason="410"),
                     "0x30"),
                ],
                [
                    ("17m", []),
                    (
                        "18m",
                        [
                            Fire(
                                {"scope": "*"},
                                "Scope *: 0.10 failed lists or watches per second over the "
                                "last 5 minutes (threshold 0.05/s).",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # Never synced from 0m; for 10m: silent at 9m, firing at 10m.
                f"{p}KubeNotSynced",
                f"{p}KubeNotSynced",
                [
                    (sel("zaroz_kube_synced", scope="*"), "0x30"),
                    (sel("zaroz_kube_synced", scope="ns"), "1x30"),
                ],
                [
                    ("9m", []),
                    (
                        "10m",
                        [
                            Fire(
                                {"scope": "*"},
                                "Scope *: the exporter has no full list of UnitSignals, so "
                                "UnitSignal metrics are missing or stale.",
                            )
                        ],
                    ),
                ],
            ),
            Case(
                # Events stop at 300 s; older than 900 s from 21m; for 5m: firing at 26m.
                f"{p}KubeWatchSilent",
                f"{p}KubeWatchSilent",
                [
                    (sel("zaroz_kube_last_watch_event_timestamp_seconds", scope="*"),
                     "0+60x5 300x40"),
                    (sel("zaroz_kube_last_watch_event_timestamp_seconds", scope="ns"),
                     "0+60x40"),
                ],
                [
                    ("25m", []),
                    (
                        "26m",
                        [
                            Fire(
                                {"scope": "*"},
                                "Scope *: the last watch event (bookmarks included) arrived "
                                "21m 0s ago (threshold 15m 0s).",
                            )
                        ],
                    ),
                ],
            ),
        ],
        "exporter": [
            Case(
                # Up until 5m, down from 6m; for 5m: silent at 10m, firing at 11m.
                f"{p}ExporterAbsent goes down",
                f"{p}ExporterAbsent",
                [(sel("up", job="zaroz-exporter", instance="a"), "1x5 0x20")],
                [("10m", []), ("11m", [Fire({}, _absent_desc(config))])],
            ),
            Case(
                # No target at all (not scraped): absent from 0m, firing at 5m.
                f"{p}ExporterAbsent never scraped",
                f"{p}ExporterAbsent",
                [(sel("up", job="other", instance="b"), "1x20")],
                [("4m", []), ("5m", [Fire({}, _absent_desc(config))])],
            ),
            Case(
                f"{p}ExporterAbsent silent while up",
                f"{p}ExporterAbsent",
                [(sel("up", job="zaroz-exporter", instance="a"), "1x20")],
                [("15m", [])],
            ),
            Case(
                # Shard 1 of 2 reports until 5m, then its target goes: Prometheus writes stale
                # markers at the next scrape (6m), so the shard is missing from 6m; for 5m:
                # silent at 10m, firing at 11m.
                f"{p}ExporterShardMissing one of two stops",
                f"{p}ExporterShardMissing",
                [
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="a"), "0x30"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="a"), "2x30"),
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="b"),
                     "1x5 stale"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="b"),
                     "2x5 stale"),
                ],
                [
                    ("10m", []),
                    ("11m", [Fire({}, "Only 1 distinct shards report: the workloads of the "
                                  "missing ones are not exported.")]),
                ],
            ),
            Case(
                # The same shard's series end without a marker (a sample is then seen for the
                # 5m lookback): its last sample, 5m, is exactly 5m old at 10m, which Prometheus
                # 2 still counts and 3 (left-open lookback) does not, so the start of "missing"
                # differs by that one evaluation. Missing from 11m on both; silent at 14m,
                # firing at 16m on both.
                f"{p}ExporterShardMissing one of two ends without stale markers",
                f"{p}ExporterShardMissing",
                [
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="a"), "0x30"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="a"), "2x30"),
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="b"), "1x5"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="b"), "2x5"),
                ],
                [
                    ("14m", []),
                    ("16m", [Fire({}, "Only 1 distinct shards report: the workloads of the "
                                  "missing ones are not exported.")]),
                ],
            ),
            Case(
                # Two pods claiming one ordinal are still one shard short.
                f"{p}ExporterShardMissing silent with every shard",
                f"{p}ExporterShardMissing",
                [
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="a"), "0x30"),
                    (sel("zaroz_exporter_shard", job="zaroz-exporter", instance="b"), "1x30"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="a"), "2x30"),
                    (sel("zaroz_exporter_shards", job="zaroz-exporter", instance="b"), "2x30"),
                ],
                [("20m", [])],
            ),
            Case(
                # Saves every minute until 10m (value: its time), then the scrapes fail (no
                # sample) while the target stays: 900 s after the last save is 25m, so the
                # condition holds from 26m; for 5m: silent at 30m, firing at 31m (1260 s).
                f"{p}CheckpointStale saves stop",
                f"{p}CheckpointStale",
                [
                    (sel("zaroz_checkpoint_last_success_timestamp_seconds",
                         job="zaroz-exporter", instance="a"), "0+60x10 _x30"),
                    (sel("up", job="zaroz-exporter", instance="a"), "1x10 0x30"),
                    (sel("zaroz_checkpoint_last_success_timestamp_seconds",
                         job="zaroz-exporter", instance="b"), "0+60x40"),
                    (sel("up", job="zaroz-exporter", instance="b"), "1x40"),
                ],
                [
                    ("30m", []),
                    ("31m", [Fire({"instance": "a"}, _stale_desc("a", "21m 0s", config))]),
                ],
            ),
            Case(
                # A target removed at 10m (no `up` after the lookback) is no stale exporter.
                f"{p}CheckpointStale silent for a removed target",
                f"{p}CheckpointStale",
                [
                    (sel("zaroz_checkpoint_last_success_timestamp_seconds",
                         job="zaroz-exporter", instance="a"), "0+60x10"),
                    (sel("up", job="zaroz-exporter", instance="a"), "1x10"),
                ],
                [("40m", [])],
            ),
            Case(
                # A save fails every minute from 6m: the increase is above 0 from 6m; for
                # 15m: silent at 20m, firing at 21m (15 failures in the window).
                f"{p}CheckpointSaveErrors keep failing",
                f"{p}CheckpointSaveErrors",
                [
                    (sel("zaroz_checkpoint_saves_total", job="zaroz-exporter", instance="a",
                         result="error"), "0x5 1+1x30"),
                    (sel("zaroz_checkpoint_saves_total", job="zaroz-exporter", instance="b",
                         result="error"), "0x40"),
                ],
                [
                    ("20m", []),
                    ("21m", [Fire({"instance": "a"}, _errors_desc("a", "15", config))]),
                ],
            ),
            Case(
                # One failed save at 6m: above 0 for less than 15m, never firing.
                f"{p}CheckpointSaveErrors silent for one failure",
                f"{p}CheckpointSaveErrors",
                [(sel("zaroz_checkpoint_saves_total", job="zaroz-exporter", instance="a",
                      result="error"), "0x5 1x30")],
                [("20m", []), ("21m", []), ("30m", [])],
            ),
            *_otlp_metrics_cases(),
        ],
    }


def _otlp_metrics_cases() -> list[Case]:
    """ZarozOtlpMetricsExportFailing: instance a's last success at 5m then failures every
    minute: over 900 s stale from 20m, firing 5m later; b pushes fine; c never pushes."""
    p = alerting.PREFIX
    name = f"{p}OtlpMetricsExportFailing"
    ts = "zaroz_exporter_otlp_metrics_last_success_timestamp_seconds"
    ex = "zaroz_exporter_otlp_metrics_exports_total"

    def desc(instance: str, ago: str) -> str:
        return (f"Instance {instance} has had no OTLP metric export accepted for {ago} "
                f"(threshold {alerting.human_duration(alerting.OTLP_STALE_SECONDS)}): the "
                "receiver's series stand still (totals are kept: the next accepted export "
                "carries them all).")

    return [
        Case(
            f"{name} after a quarter of an hour without success",
            name,
            [
                (sel(ts, job="zaroz-exporter", instance="a"), "0+60x5 300x40"),
                (sel(ex, job="zaroz-exporter", instance="a", result="failure"),
                 "0x5 1+1x40"),
                (sel(ts, job="zaroz-exporter", instance="b"), "0+60x45"),
                (sel(ex, job="zaroz-exporter", instance="b", result="failure"), "0x45"),
            ],
            [("24m", []), ("26m", [Fire({"instance": "a"}, desc("a", "21m 0s"))])],
        ),
    ]


def _stale_desc(instance: str, ago: str, config: Config) -> str:
    return (f"Instance {instance} last saved its state {ago} ago (threshold "
            f"{alerting.human_duration(config.checkpoint_stale_seconds)}): its scrapes are "
            "refused while saves fail, and a restart would begin from that save.")


def _errors_desc(instance: str, n: str, config: Config) -> str:
    return (f"Instance {instance}: {n} checkpoint saves failed in the last "
            f"{config.checkpoint_errors_window}; each failure refuses a scrape or delays "
            "durability until a save succeeds.")


def _cluster_cases(config: Config) -> list[Case]:
    """Two clusters with the same workload and UnitSignal names: each alert must judge each
    cluster alone. Every case is built so that merging the clusters would change the outcome
    (a healthy cluster hiding a broken one, or one cluster's state suppressing the other's)."""
    p = alerting.PREFIX
    cl = config.cluster_label
    a, b = {cl: "a"}, {cl: "b"}
    return [
        Case(
            # a's us-1 is stuck (lag passes 300 s at 6m, fires at 11m); b's us-1, same name,
            # waits on an invalid spec. Merged, b's invalid spec would hide a's stuck agent.
            f"{p}GenerationStuck per cluster",
            f"{p}GenerationStuck",
            [
                (sel("zaroz_unitsignal_generation_lag_seconds", **a, **US1), "0+60x30"),
                (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **a, **US1), "0x30"),
                (sel("zaroz_unitsignal_generation_lag_seconds", **b, **US1), "0+60x30"),
                (sel("zaroz_unitsignal_generation_stuck_invalid_spec", **b, **US1), "1x30"),
            ],
            [("10m", []), ("11m", [Fire({**a, **US1}, _stuck_desc("us-1", "11m 0s", 1))])],
        ),
        Case(
            # a: every unit ready in (300, 600] s, p95 585 s; b: 100x as many in <= 60 s.
            # Merged, the p95 would be under 60 s and nothing would fire.
            f"{p}UnitReadinessSlow per cluster",
            f"{p}UnitReadinessSlow",
            _hist(recording.READY, {**a, "workload": "wl"},
                  {"60": "0x30", "300": "0x30", "600": "0+1x30", "+Inf": "0+1x30"})
            + _hist(recording.READY, {**b, "workload": "wl"},
                    {"60": "0+100x30", "300": "0+100x30", "600": "0+100x30",
                     "+Inf": "0+100x30"}),
            [("15m", []), ("16m", [Fire(
                {**a, "workload": "wl"},
                "Workload wl: 95% of units became ready within 9m 45s over the last 5 minutes "
                "(threshold 5m 0s).")])],
            exprs=[(recording.quantile_name(recording.READY, "p95"), "16m",
                    [({**a, "workload": "wl"}, 585.0), ({**b, "workload": "wl"}, 57.0)])],
        ),
        Case(
            # a: 1 of 4 allocations undelivered (25%); b: 200 a minute, all delivered.
            # Merged: 1 of 204 (0.5%), under the 5% threshold.
            f"{p}AllocationsUndelivered per cluster",
            f"{p}AllocationsUndelivered",
            [
                (sel("zaroz_unit_allocations_total", **a, workload="wl", outcome="delivered"),
                 "0+3x30"),
                (sel("zaroz_unit_allocations_total", **a, workload="wl", outcome="undelivered"),
                 "0+1x30"),
                (sel("zaroz_unit_allocations_total", **b, workload="wl", outcome="delivered"),
                 "0+200x30"),
            ],
            [("10m", []), ("11m", [Fire(
                {**a, "workload": "wl"},
                "Workload wl: 25% of allocations ended undelivered over the last 5 minutes "
                "(threshold 5%), 5 allocations.")])],
            exprs=[(recording.ALLOCATIONS_UNDELIVERED_RATIO, "11m",
                    [({**a, "workload": "wl"}, 0.25), ({**b, "workload": "wl"}, 0.0)])],
        ),
        Case(
            # a's tail is stalled from 0m (head ahead, applied seq flat): unchanged for a full
            # 10m window at 10m; for 5m: silent at 14m, firing at 15m. b's, same workload,
            # moves and is caught up. Merged (max of both), a would read as caught up.
            f"{p}EventTailStalled per cluster",
            f"{p}EventTailStalled",
            [
                (sel("zaroz_route_head_seq", **a, workload="wl"), "100x30"),
                (sel("zaroz_events_last_seq", **a, workload="wl"), "50x30"),
                (sel("zaroz_route_head_seq", **b, workload="wl"), "1000+10x30"),
                (sel("zaroz_events_last_seq", **b, workload="wl"), "1000+10x30"),
            ],
            [("14m", []), ("15m", [Fire(
                {**a, "workload": "wl"},
                "Workload wl: the events route is 50 events ahead and the applied seq has not "
                f"moved for {config.tail_stalled_window}.")])],
        ),
    ]


def _stuck_desc(unitsignal: str, dur: str, count: int) -> str:
    return (
        f"UnitSignal ns/{unitsignal} (workload wl) has waited {dur} for its agent to observe "
        f"the latest spec generation (threshold 5m 0s). UnitSignals of the workload waiting "
        f"longer: {count}."
    )


def _drain(workload: str, dur: str) -> Fire:
    return Fire(
        {"workload": workload},
        f"Workload {workload}: a drain has run (or 95% of drains ran) for {dur} "
        "(threshold 30m 0s).",
    )


def _absent_desc(config: Config) -> str:
    return (
        f"No target matching {{{config.job_selector}}} has been up for {config.absent_for}; "
        "every other zaroz alert is blind."
    )


def _alert_doc(config: Config, case: Case, t: str, fires: list[Fire]) -> dict[str, object]:
    defs = {a.name: a for a in alerting.alerts(config)}
    a = defs[case.alert]
    exp = []
    for f in fires:
        # The next step is static but for the alert's labels: expand those by hand.
        labels = f.labels
        next_step = re.sub(r"\{\{ \$labels\.(\w+) \}\}",
                           lambda m, labels=labels: labels[m.group(1)], a.next_step)
        exp.append(
            {
                "exp_labels": {"severity": f.severity or a.severity, **f.labels},
                "exp_annotations": {
                    "summary": a.summary,
                    "description": f"{f.description} Next: {next_step}",
                    "runbook_url": f"{config.runbook_base}#{a.anchor}",
                },
            }
        )
    return {"eval_time": t, "alertname": case.alert, "exp_alerts": exp}


def test_documents(config: Config) -> dict[str, dict[str, object]]:
    """File name -> promtool test document."""
    rule_files = [f"../rules/{n}" for n in ("recording.yaml", "alerts.yaml")]
    return {f"{stem}.yaml": document(config, group, rule_files)
            for stem, group in cases(config).items()}


def _expr_doc(e: str, t: str, samples: list[tuple[dict[str, str], float]]) -> dict[str, object]:
    return {
        "expr": e,
        "eval_time": t,
        "exp_samples": [{"labels": sel(e, **lbl) if lbl else e, "value": v}
                        for lbl, v in samples],
    }


def document(config: Config, group: list[Case], rule_files: list[str]) -> dict[str, object]:
    """One promtool test file: `group`'s cases against `rule_files` (relative to the file)."""
    slo = {s.key: s.threshold for s in config.slos}
    group_order = list(
        dict.fromkeys(
            [r.group for r in recording.recording_rules(slo, native=config.native_histograms)]
            + [a.group for a in alerting.alerts(config)]
        )
    )
    tests = []
    for c in group:
        doc: dict[str, object] = {
            "name": c.name,
            "interval": c.interval,
            "input_series": [{"series": s, "values": v} for s, v in c.series],
            "alert_rule_test": [_alert_doc(config, c, t, f) for t, f in c.evals],
        }
        if c.exprs:
            doc["promql_expr_test"] = [_expr_doc(e, t, samples) for e, t, samples in c.exprs]
        tests.append(doc)
    return {
        "rule_files": rule_files,
        "evaluation_interval": "1m",
        # Recording groups first, as a steady-state server sees them; promtool would
        # otherwise evaluate groups by name and shift every boundary by one interval.
        "group_eval_order": group_order,
        "tests": tests,
    }
