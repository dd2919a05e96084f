"""What operators tune: SLO objectives and thresholds, alert thresholds, the exporter's job.

Everything an alert compares against lives here so `python -m alerts` can regenerate the rules
for another installation without editing expressions, and so tests can read the same numbers
the rules were built from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from alerts import recording

# Where docs/ is published with each release (pyproject's Documentation URL); docs/runbooks.md
# is its `runbooks/` page. Alerts link `<runbook_base>#<alert name in lower case>`.
PROJECT_DOCS_URL = "https://docs.zaroz.cloud/units-exporter/"
DEFAULT_RUNBOOK_BASE = PROJECT_DOCS_URL + "runbooks/"


def check_runbook_base(url: str) -> str:
    """An absolute http(s) URL without a fragment (the alert's anchor is appended to it)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment or "#" in url:
        raise ValueError(
            f"runbook base must be an absolute http(s) URL without '#', got {url!r}"
        )
    return url


@dataclass(frozen=True)
class SLO:
    """`objective` of observations of the SLO's histogram finish within `threshold` seconds.

    With classic histograms the threshold must be a bucket boundary (checked by `Config`): only
    bounds have a `_bucket{le=...}` series to count good observations from. With native
    histograms (`Config.native_histograms`) any threshold works.
    """

    key: str
    objective: float
    threshold: float

    def __post_init__(self) -> None:
        if self.key not in recording.SLO_HISTOGRAMS:
            raise ValueError(f"unknown SLO {self.key}; have {sorted(recording.SLO_HISTOGRAMS)}")
        if not 0 < self.objective < 1:
            raise ValueError(f"SLO objective must be in (0, 1), got {self.objective}")
        if not self.threshold > 0:
            raise ValueError(f"SLO threshold must be > 0 s, got {self.threshold}")

    @property
    def histogram(self) -> str:
        return recording.SLO_HISTOGRAMS[self.key]

    @property
    def error_budget(self) -> float:
        return 1 - self.objective


@dataclass(frozen=True)
class BurnRate:
    """One multi-window burn-rate rule: both windows' error ratios above `factor` x budget.

    Windows must be recorded ones (`recording.SLO_WINDOWS`): the rule reads their records.
    """

    long: str
    short: str
    factor: float
    for_: str
    severity: str

    def __post_init__(self) -> None:
        for w in (self.long, self.short):
            if w not in recording.SLO_WINDOWS:
                raise ValueError(f"burn-rate window {w} is not one of {recording.SLO_WINDOWS}")


# The SRE workbook's four pairs; factors spend 2%/5%/10%/10% of a 30 d budget.
DEFAULT_BURN_RATES = (
    BurnRate("1h", "5m", 14.4, "2m", "critical"),
    BurnRate("6h", "30m", 6.0, "15m", "critical"),
    BurnRate("1d", "2h", 3.0, "1h", "warning"),
    BurnRate("3d", "6h", 1.0, "3h", "warning"),
)


@dataclass(frozen=True)
class Config:
    """Thresholds of the generated rules. Durations are seconds unless named `*_for`."""

    # Selector of the exporter's scrape job: the absence and shard alerts read `up` and the
    # shard gauges through it, the exporter health dashboard its targets' scrape_* series.
    job_selector: str = 'job="zaroz-exporter"'
    # The label telling clusters apart (kubernetes-mixin's clusterLabel): every rule keeps it
    # in its aggregations, so one set of rules never merges two clusters' series.
    cluster_label: str = recording.CLUSTER_LABEL
    # The SLOs of readiness and allocation ack: objective, and threshold in seconds.
    slos: tuple[SLO, ...] = field(
        default_factory=lambda: (
            SLO("readiness", 0.99, recording.DEFAULT_SLO_THRESHOLDS["readiness"]),
            SLO("allocation_ack", 0.99, recording.DEFAULT_SLO_THRESHOLDS["allocation_ack"]),
        )
    )
    # Their burn-rate alerts: (long, short) window pairs, factor x error budget, for, severity.
    burn_rates: tuple[BurnRate, ...] = DEFAULT_BURN_RATES
    # A generation waiting longer than this is stuck (agents observe within seconds).
    generation_lag_seconds: float = 300.0
    generation_lag_for: str = "5m"
    invalid_spec_for: str = "5m"
    # Quantile alerts (p95 over 5 m) besides the SLOs: they catch a slow tail on low traffic
    # that a ratio SLO needs hours to notice.
    ready_p95_seconds: float = 300.0
    ready_p95_for: str = "15m"
    ack_p95_seconds: float = 5.0
    ack_p95_for: str = "15m"
    undelivered_ratio: float = 0.05
    undelivered_for: str = "10m"
    # A drain running this long (phase gauge, exporter clock) or a p95 above it.
    drain_seconds: float = 1800.0
    drain_for: str = "15m"
    startup_failed_ratio: float = 0.10
    startup_failed_for: str = "15m"
    # Events given up as lost within the window.
    events_missing_window: str = "15m"
    events_missing_for: str = "0m"
    # The tail is stalled when the head is ahead and applied seq did not move for this long,
    # or the route has not answered successfully for this long.
    tail_stalled_window: str = "10m"
    tail_stalled_for: str = "5m"
    route_success_age_seconds: float = 300.0
    route_success_for: str = "5m"
    # Watch: failures per second, not synced, or no watch event (bookmarks count) for this long.
    kube_failure_rate: float = 0.05
    kube_failures_for: str = "15m"
    kube_not_synced_for: str = "10m"
    kube_watch_event_age_seconds: float = 900.0
    kube_watch_event_for: str = "5m"
    absent_for: str = "5m"
    shard_missing_for: str = "5m"
    # Checkpoints (--state-dir): no save has succeeded for this long (a save runs at every
    # scrape and every --checkpoint-interval), looking back this far for the last one; or
    # saves have kept failing within the window for this long.
    checkpoint_stale_seconds: float = 900.0
    checkpoint_stale_for: str = "5m"
    checkpoint_lookback: str = "1d"
    checkpoint_errors_window: str = "15m"
    checkpoint_errors_for: str = "15m"
    # Base of every alert's runbook_url: where docs/runbooks.md is published (see above).
    # Installations that host their own copy set it (`python -m alerts --runbook-base`).
    runbook_base: str = DEFAULT_RUNBOOK_BASE
    # The switch: quantile and SLO rules (and dashboards) over native histograms (Prometheus
    # scraping with --enable-feature=native-histograms), where SLO thresholds need not be
    # bucket boundaries. Off: classic `_bucket` series, thresholds on bucket boundaries.
    native_histograms: bool = False

    def __post_init__(self) -> None:
        check_runbook_base(self.runbook_base)
        if not self.native_histograms:
            for s in self.slos:
                recording.check_bucket_boundary(s.histogram, s.threshold)

    def slo(self, key: str) -> SLO:
        for s in self.slos:
            if s.key == key:
                return s
        raise KeyError(key)


DEFAULT_CONFIG = Config()
# The native-histogram rules shipped beside the classic ones (alerts/rules/native/): the same
# objectives and thresholds, read from native histograms.
NATIVE_CONFIG = dataclasses.replace(DEFAULT_CONFIG, native_histograms=True)
