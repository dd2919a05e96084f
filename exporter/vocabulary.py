"""The domain's words: event types, drain reasons, phases, outcomes, results and refusals.

The bottom of the package: the model reads them, the catalog declares label values with them, the
sinks render them and the sources report with them. Imports nothing from the exporter, so no
layer has to reach up for a word (docs/architecture in the README).
"""

from __future__ import annotations

# Bounded label values.
DRAIN_REASONS = ("stop", "destroy", "replace", "scale_down")
ALLOCATION_OUTCOMES = ("delivered", "undelivered", "superseded", "abandoned")
STARTUP_OUTCOMES = ("ready", "failed", "destroyed")
INVALID_REASONS = ("json", "schema")
# Valid per the schema, but a value the model or the store cannot hold (model/ranges.py): its
# series is made at the first such event, so a healthy log's exposition is unchanged.
INVALID_RANGE = "range"
# Where an event came from: the events route, a webhook delivery, or a file (replay).
EVENT_SOURCES = ("route", "webhook", "file")
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

PHASES = ("starting", "ready", "allocated", "draining")
VIOLATION_RULES = (
    "spec_schema",
    "status_schema",
    "observed_generation_regressed",
    "observed_generation_ahead",
    "unknown_allocation_ack",
    "agent_restart",
    "out_of_range",
)

# Kubernetes list/watch: bounded label values.
KUBE_RELIST_REASONS = ("initial", "expired", "error")
KUBE_WATCH_EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "unknown")
# How a reflector syncs: the streaming list (one watch with sendInitialEvents), or paginated LISTs.
KUBE_LIST_MODES = ("watch-list", "paginated")
# --kube-watch-list: the streaming list where offered (auto), only (on), never (off).
KUBE_WATCH_LIST_CHOICES = ("auto", "on", "off")

# The webhook receiver's results, each a `result` of zaroz_webhook_deliveries_total. What a
# signed, parsed delivery did (the model's `WorkloadLog.offer` results, and the intake's
# `ignored`): answered with a 2xx.
DELIVERY_APPLIED = ("accepted", "duplicate", "refetched", "ping", "invalid", "ignored")
# Why a delivery was refused (the receiver answers each with its own 4xx or 503; with
# checkpoint_failed the event was applied, but the checkpoint that would hold it failed).
DELIVERY_REFUSALS = (
    "cross_workload", "missing_signature", "bad_signature", "stale_timestamp", "future_timestamp",
    "no_secret", "too_large", "unsupported_media_type", "malformed_json", "missing_workload",
    "checkpoint_failed",
)  # fmt: skip
# Every result; series exist at 0 from the start so rates work at once.
DELIVERY_RESULTS = DELIVERY_APPLIED + DELIVERY_REFUSALS
# A checkpoint save: written, unchanged (same bytes as the last), or error.
SAVE_RESULTS = ("written", "unchanged", "error")
# Why a workload was dropped with its state and series: its checkpoint was restored by a shard
# that does not own it (the shard count or index changed), or it was gone from the route's
# workload list for longer than --workload-retention.
WORKLOAD_DROP_REASONS = ("other_shard", "left_route")
# --workload-retention's default, seconds (the demo, which has no such flag, uses it too).
WORKLOAD_RETENTION_S = 24 * 3600.0
# A UnitSignal's activity as the agent reports it (`none`: not reported).
ACTIVITIES = ("idle", "busy", "none")

# -- Sources: Kubernetes scopes -------------------------------------------------------------------

# The `scope` of a cluster-wide reflector: not a valid namespace name, so never ambiguous.
ALL_NAMESPACES = "*"


def scope_label(namespace: str | None) -> str:
    """A reflector's `scope` label value: its namespace, or `*` for all."""
    return namespace or ALL_NAMESPACES
