"""Exporter health: can the other two dashboards be trusted right now?

Every number on them depends on the exporter seeing the cluster (list/watch), tailing the event
log (route, webhooks) without losing events, and being scraped. This dashboard shows each of
those inputs and what is being lost.
"""

from __future__ import annotations

from grafanalib import core as g

from . import lib
from .lib import WORKLOAD, rate, rate_by, select, target

UID = "zaroz-exporter"

# Exporter-wide series of this exporter only: Prometheus' own scrape_* series carry the target's
# job and instance, so they are joined on those to the exporter's build info.
def _scrape(name: str) -> str:
    """A Prometheus-generated per-target series (scrape_*), limited to the exporter's targets
    (those of its scrape selector, as the rules' `up` alert reads them)."""
    if not name.startswith("scrape_"):
        raise ValueError(f"{name} is not one of Prometheus' scrape_* series")
    lib.metric("zaroz_exporter_build_info")
    c = lib.cluster_label()
    own = (f"on ({c}, job, instance) group_left () max by ({c}, job, instance) "
           f"(zaroz_exporter_build_info{{{c}{lib.CLUSTER}, {lib.exporter_selector()}}})")
    return f"{name}{{{c}{lib.CLUSTER}}} * {own}"


def build() -> g.Dashboard:
    """The Exporter health dashboard."""
    w = {"workload": WORKLOAD}
    kube = [
        (
            lib.timeseries(
                "List/watch failures",
                "Failed LIST pages and broken watches per second by verb and reason "
                "(refused requests by status, or timeout, connection, truncated, 410...).",
                [
                    rate_by(("scope", "verb", "reason"), "zaroz_kube_failures_total")
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Relists",
                "Full LISTs started per second by reason: initial, expired (410, the watch fell "
                "behind compaction) or error. A steady rate of relists is load on the API server.",
                [
                    rate_by(("scope", "reason"), "zaroz_kube_relists_total")
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Watch silence",
                "Seconds since the last watch event (bookmarks included) per scope; long "
                "silence on a busy cluster means a stuck watch.",
                [
                    target(
                        "time() - max by (scope) ("
                        + select("zaroz_kube_last_watch_event_timestamp_seconds")
                        + ")",
                        "{{scope}}",
                    ),
                ],
                "s",
            ),
            8,
        ),
    ]
    events = [
        (
            lib.timeseries(
                "Event tail lag (seqs)",
                "Route head seq minus the last seq applied, per workload: events the exporter "
                "has not applied yet.",
                [
                    target(
                        f"max by (workload) ({select('zaroz_route_head_seq', **w)}) - "
                        f"max by (workload) ({select('zaroz_events_last_seq', **w)})",
                        "{{workload}}",
                    )
                ],
                "short",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Last event age",
                "Seconds since the occurred_at of the last event applied, per workload. Grows "
                "on an idle workload too: read it together with the seq lag.",
                [
                    target(
                        "time() - max by (workload) ("
                        + select("zaroz_events_last_occurred_timestamp_seconds", **w)
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
                "Gaps, missing, duplicate and invalid events",
                "Per second: runs of seqs given up as lost (gaps), the seqs lost (missing), "
                "events ignored as duplicates, and events not applied (invalid, by reason).",
                [
                    *(
                        rate_by(("workload",), f"zaroz_events_{what}_total",
                                f"{{{{workload}}}} {what}", **w)
                        for what in ("gaps", "missing", "duplicate")
                    ),
                    rate_by(("workload", "reason"), "zaroz_events_invalid_total",
                            "{{workload}} invalid ({{reason}})", **w),
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Events route requests",
                "Requests to the events route per second by result (HTTP status, or timeout, "
                "connection, truncated, invalid_body, token).",
                [
                    rate_by(("result",), "zaroz_route_requests_total", **w)
                ],
                "cps",
                stacked=True,
            ),
            12,
        ),
        (
            lib.timeseries(
                "Webhook deliveries",
                "Webhook deliveries per second by result: accepted, duplicate, ping, invalid, "
                "ignored, or refused (signature, timestamp, size, media type...). Exporter-wide: "
                "a refused delivery's workload cannot be trusted.",
                [
                    rate_by(("result",), "zaroz_webhook_deliveries_total")
                ],
                "cps",
                stacked=True,
            ),
            12,
        ),
        (
            lib.timeseries(
                "Webhook backfills and silence",
                "Route fetches the webhook intake asked for per second (gap: a seq missing past "
                "the grace; ping: the webhook's cursor was ahead).",
                [
                    rate_by(("workload", "reason"), "zaroz_webhook_backfills_total", **w)
                ],
                "cps",
            ),
            12,
        ),
        (
            lib.timeseries(
                "Last webhook delivery age",
                "Seconds since the workload's last signed webhook delivery; pings arrive even "
                "when idle, so a growing age means deliveries stopped.",
                [
                    target(
                        "time() - max by (workload) ("
                        + select("zaroz_webhook_last_delivery_timestamp_seconds", **w)
                        + ")",
                        "{{workload}}",
                    )
                ],
                "s",
            ),
            12,
        ),
    ]
    exporter = [
        (
            lib.timeseries(
                "Trace spans",
                "Spans per second: ended and queued, accepted by the OTLP receiver, dropped "
                "(queue full or still queued at shutdown), and failed export batches.",
                [
                    target(f"sum ({rate(select('zaroz_traces_spans_total'))})", "queued"),
                    target(
                        f"sum ({rate(select('zaroz_traces_spans_exported_total'))})", "exported"
                    ),
                    target(
                        f"sum ({rate(select('zaroz_traces_spans_dropped_total'))})", "dropped"
                    ),
                    target(
                        f"sum ({rate(select('zaroz_traces_export_failures_total'))})",
                        "failed batches",
                    ),
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "OTLP metric exports",
                "OTLP metric pushes per second by result (success, failure, checkpoint_failed), "
                "and the seconds since each instance's last accepted one.",
                [
                    target(
                        "sum by (result) ("
                        + rate(select("zaroz_exporter_otlp_metrics_exports_total"))
                        + ")",
                        "{{result}}",
                    ),
                    target(
                        "time() - max by (instance) ("
                        + select("zaroz_exporter_otlp_metrics_last_success_timestamp_seconds")
                        + ")",
                        "{{instance}} since success",
                    ),
                ],
                "short",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Scrape size",
                "Uncompressed bytes of the exporter's previous exposition, per instance: the "
                "cost of each scrape for Prometheus and the network.",
                [
                    target(
                        f"max by (instance) ({select('zaroz_exporter_last_scrape_bytes')})",
                        "{{instance}} bytes",
                    ),
                ],
                "bytes",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Scrape series",
                "Samples Prometheus took per scrape of the exporter (scrape_samples_scraped) "
                "and series in the exporter's previous exposition.",
                [
                    target(_scrape("scrape_samples_scraped"), "{{instance}} samples scraped"),
                    target(
                        f"max by (instance) ({select('zaroz_exporter_series')})",
                        "{{instance}} series",
                    ),
                ],
                "short",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Scrape duration",
                "How long Prometheus' scrape of the exporter took (scrape_duration_seconds) "
                "and the exporter's own render-and-send time for the previous scrape.",
                [
                    target(_scrape("scrape_duration_seconds"), "{{instance}} Prometheus"),
                    target(
                        "max by (instance) ("
                        + select("zaroz_exporter_last_scrape_duration_seconds")
                        + ")",
                        "{{instance}} exporter",
                    ),
                ],
                "s",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Checkpoint saves",
                "Checkpoint writes per second by result (written, unchanged, error: an error "
                "refuses the scrape so nothing unsaved is exposed).",
                [
                    rate_by(("result",), "zaroz_checkpoint_saves_total")
                ],
                "cps",
            ),
            8,
        ),
        (
            lib.timeseries(
                "Shards reporting",
                "Exporter instances reporting a shard ordinal against the configured shard "
                "count: fewer reporting than configured means some workloads are not watched "
                "by anyone.",
                [
                    target(f"count ({select('zaroz_exporter_shard')})", "reporting"),
                    target(f"max ({select('zaroz_exporter_shards')})", "configured"),
                ],
                "short",
            ),
            8,
        ),
    ]
    return lib.dashboard(
        "zaroz / Exporter health",
        UID,
        "Whether the exporter's inputs are healthy: Kubernetes list/watch, the event log tail "
        "(route and webhooks), losses, traces and its own scrapes. Generated by "
        "`python -m dashboards`; do not edit.",
        [
            ("Kubernetes list/watch", kube),
            ("Event log", events),
            ("Traces and scrapes", exporter),
        ],
        workload_source="zaroz_events_last_seq",
    )
