"""Alerting rules, built from `alerts.config.Config` and the recording rules.

Style follows kubernetes-mixin: CamelCase names with one prefix, a `severity` label (critical
pages, warning opens a ticket, info only annotates), a static `summary`, a templated
`description` and a `runbook_url` whose anchor is the alert name in lower case (the anchor
GitHub gives the `## <Alert>` heading in docs/runbooks.md). SLO alerts follow the SRE workbook's
multi-window multi-burn-rate recipe: one alert name, one rule per (long, short) window pair,
told apart by `long`/`short` labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alerts import recording
from alerts.config import SLO, Config
from alerts.template import CondKey, Sym, call

PREFIX = "Zaroz"
SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Alert:
    """One `alert:` entry."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str
    group: str
    extra_labels: dict[str, str] = field(default_factory=dict)
    # What the on-call engineer does first; ends the description after "Next: ".
    next_step: str = ""

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX):
            raise ValueError(f"alert {self.name} lacks the {PREFIX} prefix")
        if not isinstance(self.severity, Sym) and self.severity not in SEVERITIES:
            raise ValueError(f"alert {self.name}: severity {self.severity}")
        if not self.next_step:
            raise ValueError(f"alert {self.name}: no next step for the on-call engineer")

    @property
    def full_description(self) -> str:
        return f"{self.description} Next: {self.next_step}"

    @property
    def anchor(self) -> str:
        return self.name.lower()

    def as_dict(self, config: Config) -> dict[object, object]:
        out: dict[object, object] = {"alert": self.name, "expr": self.expr}
        if isinstance(self.for_, Sym):  # the mixin: the same test, in jsonnet
            out[CondKey("for", f"!std.member(['', '0m', '0s'], {self.for_.code})")] = (
                str(self.for_))
        elif self.for_ not in ("", "0m", "0s"):
            out["for"] = self.for_
        out["labels"] = {"severity": str(self.severity), **self.extra_labels}
        out["annotations"] = {
            "summary": self.summary,
            "description": self.full_description,
            "runbook_url": f"{config.runbook_base}#{self.anchor}",
        }
        return out


def _num(x: float) -> str:
    """A threshold as PromQL and humans write it (300, not 300.0)."""
    return recording.le_value(x)


def human_duration(seconds: float) -> str:
    """A threshold in seconds as Prometheus's `humanizeDuration` writes values ("5m 0s",
    "1h 0m 0s", "9.75s", "500ms"), so a description compares like with like."""
    if isinstance(seconds, Sym):
        return call("duration", seconds)
    if seconds < 1:
        return f"{seconds * 1000:.4g}ms"
    if seconds < 60:
        return f"{seconds:.4g}s"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    while parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{v}{u}" for v, u in parts)


def percent(ratio: float) -> str:
    """A ratio as `humanizePercentage` writes values (0.05 -> "5%")."""
    return f"{ratio * 100:.4g}%"


def count_of(query: str, fmt: str = "humanize", cl: str = recording.CLUSTER_LABEL) -> str:
    """A template fragment: the value of `query` with each `workload=%q` filled by the alert's
    workload and cluster (`cl`: an alert without the label reads "", which matches series
    without it), so the count is of the alert's cluster only.

    Prometheus runs it when the alert fires, so a per-UnitSignal alert can say how many of the
    workload's UnitSignals share its problem (Alertmanager groups them by workload).
    """
    value = "{{ . | first | value | humanize }}" if fmt == "humanize" else (
        '{{ . | first | value | printf "%.0f" }}'
    )
    n = query.count("workload=%q")
    if n != query.count("%q"):
        raise ValueError(f"every %q must be a workload=%q matcher: {query}")
    query = query.replace("workload=%q", f"{cl}=%q,workload=%q")
    args = f" $labels.{cl} $labels.workload" * n
    return f"{{{{ with printf `{query}`{args} | query }}}}{value}{{{{ else }}}}0{{{{ end }}}}"


def _burn_rate_alerts(slo: SLO, name: str, what: str, config: Config) -> list[Alert]:
    """The SRE workbook's window pairs (`Config.burn_rates`).

    Both windows must burn: the long one proves it matters, the short one that it is still
    happening (so the alert resolves minutes after the burn stops).
    """
    pairs = [(b.long, b.short, b.factor, b.for_, b.severity) for b in config.burn_rates]
    cl = config.cluster_label
    out = []
    budget = slo.error_budget
    for long, short, factor, for_, severity in pairs:
        limit = f"({_num(factor)} * {budget:.6g})"
        # Observations in the long window: a native histogram has no `_count` series.
        measured = (
            f"sum(histogram_count(increase({slo.histogram}{{workload=%q}}[{long}])))"
            if config.native_histograms
            else f"sum(increase({slo.histogram}_count{{workload=%q}}[{long}]))"
        )
        expr = (
            f"{recording.slo_error_ratio_name(slo.key, long)} > {limit}\n"
            f"and on ({cl}, workload)\n"
            f"{recording.slo_error_ratio_name(slo.key, short)} > {limit}"
        )
        out.append(
            Alert(
                name,
                expr,
                for_,
                severity,  # type: ignore[arg-type]
                f"{what} SLO error budget is burning fast.",
                f"Workload {{{{ $labels.workload }}}}: {{{{ $value | humanizePercentage }}}} "
                f"of {what.lower()} took longer than {_num(slo.threshold)} s over the last "
                f"{long} (and the last {short}), out of "
                + count_of(measured, fmt="int", cl=cl)
                + f" measured in the last {long}: {_num(factor)}x the rate the "
                f"{slo.objective:.4g} objective allows (threshold "
                f"{percent(factor * budget)}).",
                "zaroz-slo",
                {"long": long, "short": short},
                next_step=f"open the runbook's first query; then as for {what.lower()} being slow "
                "(which units, which stage).",
            )
        )
    return out


def alerts(config: Config) -> list[Alert]:
    """Every alert, in file order."""
    c = config
    cl = c.cluster_label  # kept in every aggregation: clusters are never merged
    us = f"{cl}, namespace, unitsignal, workload"
    ready_slo = c.slo("readiness")
    ack_slo = c.slo("allocation_ack")
    return [
        # UnitSignals: the agent did not catch up with the spec.
        Alert(
            f"{PREFIX}GenerationStuck",
            f"max by ({us}) (zaroz_unitsignal_generation_lag_seconds) > "
            f"{_num(c.generation_lag_seconds)}\n"
            f"unless on ({us})\n"
            f"max by ({us}) (zaroz_unitsignal_generation_stuck_invalid_spec) == 1",
            c.generation_lag_for,
            "critical",
            "A UnitSignal generation has not been observed by its agent.",
            "UnitSignal {{ $labels.namespace }}/{{ $labels.unitsignal }} (workload "
            "{{ $labels.workload }}) has waited {{ $value | humanizeDuration }} for its agent "
            "to observe the latest spec generation (threshold "
            f"{human_duration(c.generation_lag_seconds)}). UnitSignals of the workload waiting "
            f"longer: "
            + count_of(
                "count(max by (namespace, unitsignal) "
                "(zaroz_unitsignal_generation_lag_seconds{workload=%q}) > "
                f"{_num(c.generation_lag_seconds)} unless on (namespace, unitsignal) "
                "max by (namespace, unitsignal) "
                "(zaroz_unitsignal_generation_stuck_invalid_spec{workload=%q}) == 1)", cl=cl,
            )
            + ".",
            "zaroz-unitsignals",
            next_step="check the unit's agent (kubectl -n {{ $labels.namespace }} get "
            "unitsignal {{ $labels.unitsignal }} -o yaml: does status.seq move?) and restart "
            "it; many at once: the agent rollout or node pool.",
        ),
        Alert(
            f"{PREFIX}GenerationStuckInvalidSpec",
            f"max by ({us}) (zaroz_unitsignal_generation_stuck_invalid_spec) == 1",
            c.invalid_spec_for,
            "critical",
            "A UnitSignal generation will never be observed: its spec is invalid.",
            "UnitSignal {{ $labels.namespace }}/{{ $labels.unitsignal }} (workload "
            "{{ $labels.workload }}) has a pending generation whose spec fails the schema; "
            "the agent refuses it, so the unit will not follow its spec. UnitSignals of the "
            "workload stuck on an invalid spec: "
            + count_of("sum(zaroz_unitsignal_generation_stuck_invalid_spec{workload=%q})",
                       cl=cl)
            + ".",
            "zaroz-unitsignals",
            next_step="read the spec (kubectl -n {{ $labels.namespace }} get unitsignal "
            "{{ $labels.unitsignal }} -o yaml), find its writer in metadata.managedFields and "
            "have it write a valid spec.",
        ),
        Alert(
            f"{PREFIX}UnitSignalSpecInvalid",
            f"max by ({us}) (zaroz_unitsignal_spec_valid) == 0",
            c.invalid_spec_for,
            "warning",
            "A UnitSignal spec fails its schema.",
            "UnitSignal {{ $labels.namespace }}/{{ $labels.unitsignal }} (workload "
            "{{ $labels.workload }}) has a spec that fails unit-signal-spec.schema.json.",
            "zaroz-unitsignals",
            next_step="correct the spec at its writer (metadata.managedFields names it); the "
            "agent will refuse the next change until then.",
        ),
        Alert(
            f"{PREFIX}UnitSignalConformanceViolations",
            f"sum by ({cl}, workload, rule) "
            "(increase(zaroz_unitsignal_conformance_violations_total[15m])) > 0",
            "",
            "info",
            "UnitSignals broke the agent contract.",
            "Workload {{ $labels.workload }}: {{ $value | humanize }} violations of rule "
            "{{ $labels.rule }} in the last 15 minutes.",
            "zaroz-unitsignals",
            next_step="tell the agent's owners the rule and workload.",
        ),
        # Lifecycle (event clock).
        Alert(
            f"{PREFIX}UnitReadinessSlow",
            f"{recording.quantile_name(recording.READY, 'p95')} > {_num(c.ready_p95_seconds)}",
            c.ready_p95_for,
            "warning",
            "Units take long to become ready.",
            "Workload {{ $labels.workload }}: 95% of units became ready within "
            "{{ $value | humanizeDuration }} over the last 5 minutes (threshold "
            f"{human_duration(c.ready_p95_seconds)}).",
            "zaroz-lifecycle",
            next_step="compare p50 with p95 (all slow, or a subset such as a node pool?).",
        ),
        Alert(
            f"{PREFIX}AllocationAckSlow",
            f"{recording.quantile_name(recording.ALLOCATION_ACK, 'p95')} > "
            f"{_num(c.ack_p95_seconds)}",
            c.ack_p95_for,
            "warning",
            "Allocations take long to be acknowledged.",
            "Workload {{ $labels.workload }}: the 95th percentile allocation ack time is "
            "{{ $value | humanizeDuration }} over the last 5 minutes (threshold "
            f"{human_duration(c.ack_p95_seconds)}).",
            "zaroz-lifecycle",
            next_step="check whether generations are observed slowly too (agents, API server).",
        ),
        Alert(
            f"{PREFIX}AllocationsUndelivered",
            f"{recording.ALLOCATIONS_UNDELIVERED_RATIO} > {_num(c.undelivered_ratio)}",
            c.undelivered_for,
            "critical",
            "Allocations are not being delivered to units.",
            "Workload {{ $labels.workload }}: {{ $value | humanizePercentage }} of allocations "
            f"ended undelivered over the last 5 minutes (threshold {percent(c.undelivered_ratio)}"
            "), "
            + count_of(
                'sum(increase(zaroz_unit_allocations_total{workload=%q,outcome="undelivered"}'
                "[5m]))",
                fmt="int", cl=cl,
            )
            + " allocations.",
            "zaroz-lifecycle",
            next_step="stop allocating to the failing units; check for stuck generations "
            "(ZarozGenerationStuck) and unit failures in the workload.",
        ),
        Alert(
            f"{PREFIX}DrainTooLong",
            f"max by ({cl}, workload) "
            '(zaroz_workload_unitsignal_oldest_phase_seconds{phase="draining"})'
            f" > {_num(c.drain_seconds)}\n"
            f"or\n"
            f"{recording.quantile_name(recording.DRAIN, 'p95')} > {_num(c.drain_seconds)}",
            c.drain_for,
            "warning",
            "Unit drains run too long.",
            "Workload {{ $labels.workload }}: a drain has run (or 95% of drains ran) for "
            f"{{{{ $value | humanizeDuration }}}} (threshold {human_duration(c.drain_seconds)}).",
            "zaroz-lifecycle",
            next_step="find the draining UnitSignals; are sessions holding them or do the "
            "agents ignore the drain?",
        ),
        Alert(
            f"{PREFIX}UnitStartupsFailing",
            f"{recording.STARTUPS_FAILED_RATIO} > {_num(c.startup_failed_ratio)}",
            c.startup_failed_for,
            "warning",
            "Unit startups are failing.",
            "Workload {{ $labels.workload }}: {{ $value | humanizePercentage }} of startups "
            "failed before the unit became ready over the last 5 minutes (threshold "
            f"{percent(c.startup_failed_ratio)}).",
            "zaroz-lifecycle",
            next_step="read the failure reasons; roll back the release or config that broke "
            "startup.",
        ),
        *_burn_rate_alerts(ready_slo, f"{PREFIX}ReadinessBudgetBurn", "Readiness", c),
        *_burn_rate_alerts(ack_slo, f"{PREFIX}AllocationAckBudgetBurn", "Allocation ack", c),
        # The event log and its tail.
        Alert(
            f"{PREFIX}EventsMissing",
            f"sum by ({cl}, workload) "
            f"(increase(zaroz_events_missing_total[{c.events_missing_window}])) > 0",
            c.events_missing_for,
            "warning",
            "Events of the workload's log were lost.",
            "Workload {{ $labels.workload }}: {{ $value | humanize }} events were given up as "
            f"lost in the last {c.events_missing_window}; measurements that needed them are "
            "missing.",
            "zaroz-events",
            next_step="check for cursor expiries (the exporter fell behind the route's "
            "retention) and report platform gaps to the route owners.",
        ),
        Alert(
            f"{PREFIX}EventTailStalled",
            # No change inside the window, and the sample at or before its start holds the
            # same seq: Prometheus 2 counts a sample exactly at the start in the range,
            # Prometheus 3 leaves it out (ranges are left-open), so `changes()` alone
            # would see one scrape interval less on 3 (and less than the window wherever
            # the evaluation falls between scrapes); the `offset` sample closes the gap on
            # both, so the seq has held still for the whole window.
            f"{recording.EVENTS_BEHIND} > 0\n"
            f"and on ({cl}, workload)\n"
            f"max by ({cl}, workload) "
            f"(changes(zaroz_events_last_seq[{c.tail_stalled_window}])) == 0\n"
            f"and on ({cl}, workload)\n"
            f"max by ({cl}, workload) (zaroz_events_last_seq)\n"
            f"== max by ({cl}, workload) "
            f"(zaroz_events_last_seq offset {c.tail_stalled_window})",
            c.tail_stalled_for,
            "warning",
            "The exporter stopped applying a workload's events.",
            "Workload {{ $labels.workload }}: the events route is {{ $value | humanize }} "
            f"events ahead and the applied seq has not moved for {c.tail_stalled_window}.",
            "zaroz-events",
            next_step="read the exporter's logs for this workload's tailer; restart it if "
            "wedged (it resumes from its cursor).",
        ),
        Alert(
            f"{PREFIX}EventRouteFailing",
            f"time() - max by ({cl}, workload) (zaroz_route_last_success_timestamp_seconds) > "
            f"{_num(c.route_success_age_seconds)}",
            c.route_success_for,
            "warning",
            "The events route has not answered the exporter successfully.",
            "Workload {{ $labels.workload }}: the last successful events route request was "
            "{{ $value | humanizeDuration }} ago (threshold "
            f"{human_duration(c.route_success_age_seconds)}).",
            "zaroz-events",
            next_step="check the request results by code: credentials, network, or the route.",
        ),
        # Kubernetes list/watch.
        Alert(
            f"{PREFIX}KubeWatchFailing",
            f"sum by ({cl}, scope) (rate(zaroz_kube_failures_total[5m])) > "
            f"{_num(c.kube_failure_rate)}",
            c.kube_failures_for,
            "warning",
            "The UnitSignal list/watch keeps failing.",
            "Scope {{ $labels.scope }}: {{ $value | printf \"%.2f\" }} failed lists or watches per "
            f"second over the last 5 minutes (threshold {_num(c.kube_failure_rate)}/s).",
            "zaroz-kube",
            next_step="check the failure reasons: RBAC or token, expired watches, the API "
            "server.",
        ),
        Alert(
            f"{PREFIX}KubeNotSynced",
            f"max by ({cl}, scope) (zaroz_kube_synced) == 0",
            c.kube_not_synced_for,
            "warning",
            "The UnitSignal reflector has not completed its first list.",
            "Scope {{ $labels.scope }}: the exporter has no full list of UnitSignals, so "
            "UnitSignal metrics are missing or stale.",
            "zaroz-kube",
            next_step="check the list requests' results and the exporter's logs.",
        ),
        Alert(
            f"{PREFIX}KubeWatchSilent",
            f"time() - max by ({cl}, scope) (zaroz_kube_last_watch_event_timestamp_seconds) > "
            f"{_num(c.kube_watch_event_age_seconds)}",
            c.kube_watch_event_for,
            "warning",
            "The UnitSignal watch has delivered no events.",
            "Scope {{ $labels.scope }}: the last watch event (bookmarks included) arrived "
            "{{ $value | humanizeDuration }} ago (threshold "
            f"{human_duration(c.kube_watch_event_age_seconds)}).",
            "zaroz-kube",
            next_step="restart the exporter (it relists); look for proxies that cut "
            "long-lived connections.",
        ),
        # The exporter itself.
        Alert(
            f"{PREFIX}ExporterAbsent",
            f"absent(up{{{c.job_selector}}} == 1)",
            c.absent_for,
            "critical",
            "The zaroz exporter is down or not scraped.",
            f"No target matching {{{c.job_selector}}} has been up for {c.absent_for}; every "
            "other zaroz alert is blind.",
            "zaroz-exporter",
            next_step="check the exporter's pod, its /healthz and the scrape job's discovery.",
        ),
        Alert(
            f"{PREFIX}ExporterShardMissing",
            f"count by ({cl}) (count_values by ({cl}) (\"ordinal\", "
            f"zaroz_exporter_shard{{{c.job_selector}}}))"
            f" < max by ({cl}) (zaroz_exporter_shards{{{c.job_selector}}})",
            c.shard_missing_for,
            "critical",
            "A shard of the zaroz exporter is missing.",
            "Only {{ $value }} distinct shards report: the workloads of the missing ones are "
            "not exported.",
            "zaroz-exporter",
            next_step="bring the missing StatefulSet pod back; replicas must equal "
            "--total-shards.",
        ),
        Alert(
            f"{PREFIX}CheckpointStale",
            f"time() - max by ({cl}, instance) (last_over_time("
            f"zaroz_checkpoint_last_success_timestamp_seconds{{{c.job_selector}}}"
            f"[{c.checkpoint_lookback}])) > {_num(c.checkpoint_stale_seconds)}\n"
            f"and on ({cl}, instance)\n"
            f"max by ({cl}, instance) (up{{{c.job_selector}}})",
            c.checkpoint_stale_for,
            "critical",
            "The exporter has not saved its checkpoint.",
            "Instance {{ $labels.instance }} last saved its state "
            "{{ $value | humanizeDuration }} ago (threshold "
            f"{human_duration(c.checkpoint_stale_seconds)}): its scrapes are refused while "
            "saves fail, and a restart would begin from that save.",
            "zaroz-exporter",
            next_step="read the exporter's log for \"checkpoint not written\" (its error says "
            "why: disk full, read-only volume, I/O error) and fix the state volume.",
        ),
        Alert(
            f"{PREFIX}CheckpointSaveErrors",
            f"sum by ({cl}, instance) (increase(zaroz_checkpoint_saves_total"
            f"{{{c.job_selector},result=\"error\"}}[{c.checkpoint_errors_window}])) > 0",
            c.checkpoint_errors_for,
            "warning",
            "Checkpoint saves keep failing now and then.",
            "Instance {{ $labels.instance }}: {{ $value | humanize }} checkpoint saves failed "
            f"in the last {c.checkpoint_errors_window}; each failure refuses a scrape or "
            "delays durability until a save succeeds.",
            "zaroz-exporter",
            next_step="read the exporter's log for \"checkpoint not written\" and check the "
            "state volume's free space and errors.",
        ),
        *otlp_metrics_alerts(c),
    ]


# -- OTLP metric export (--otlp-metrics-endpoint): its own block ---------------------------------

OTLP_STALE_SECONDS = 900  # no accepted export for this long, while exports are tried
OTLP_WINDOW = "15m"


def otlp_metrics_alerts(c: Config) -> list[Alert]:
    """Only instances that push (their exports counter exists) can fire; 0 before any
    success counts as long ago."""
    cl = c.cluster_label
    return [
        Alert(
            f"{PREFIX}OtlpMetricsExportFailing",
            f"time() - max by ({cl}, instance) ("
            f"zaroz_exporter_otlp_metrics_last_success_timestamp_seconds{{{c.job_selector}}})"
            f" > {OTLP_STALE_SECONDS}\n"
            f"and on ({cl}, instance)\n"
            f"sum by ({cl}, instance) (increase(zaroz_exporter_otlp_metrics_exports_total"
            f"{{{c.job_selector},result!=\"success\"}}[{OTLP_WINDOW}])) > 0",
            "5m",
            "warning",
            "The exporter's OTLP metric pushes are not accepted.",
            "Instance {{ $labels.instance }} has had no OTLP metric export accepted for "
            "{{ $value | humanizeDuration }} (threshold "
            f"{human_duration(OTLP_STALE_SECONDS)}): the receiver's series stand "
            "still (totals are kept: the next accepted export carries them all).",
            "zaroz-exporter",
            next_step="read the exporter's log for \"metrics export failed\" (its error "
            "names the receiver's answer) and check the receiver and the network to it.",
        ),
    ]
