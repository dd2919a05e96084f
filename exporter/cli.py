"""Command line: `serve` (default), `replay`, `demo` and `state`. Every flag has an environment
variable.

Heavy modules (aiohttp, the tailer, the simulator) are imported inside the commands that use
them, so `replay` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from exporter import __version__
from exporter.commands.errors import ConfigError
from exporter.vocabulary import KUBE_WATCH_LIST_CHOICES, WORKLOAD_RETENTION_S

ENV_PREFIX = "ZAROZ_EXPORTER_"
DEFAULT_PORT = 9817


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows a default only when there is one (no `(default: None)`)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, [], False, ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr (exit code 2), like every other config error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _env_name(flag: str, scope: str = "") -> str:
    return ENV_PREFIX + scope + flag.lstrip("-").replace("-", "_").upper()


def _add(p: argparse.ArgumentParser, flag: str, *, help: str, scope: str = "",
         aliases: tuple[str, ...] = (), **kw: Any) -> None:
    """A flag whose default comes from ZAROZ_EXPORTER_[SCOPE_]<FLAG>, shown in --help.
    `aliases`: other spellings (e.g. exporter-toolkit's `--web.config.file`)."""
    env = _env_name(flag, scope)
    raw = os.environ.get(env)
    if raw is not None:
        kw["default"] = _from_env(flag, env, raw, kw)
    if aliases:
        kw.setdefault("dest", flag.lstrip("-").replace("-", "_"))
    p.add_argument(*aliases, flag, help=f"{help} [env {env}]", **kw)


def _from_env(flag: str, env: str, raw: str, kw: dict[str, Any]) -> Any:
    """An environment variable's value, checked as argparse checks the flag's."""
    action = kw.get("action")
    if action == "store_true":
        if raw.strip().lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off", ""):
            raise ConfigError(f"{env} ({flag})", raw, "not a boolean (true or false)")
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if action == "append":
        return [v.strip() for v in raw.split(",") if v.strip()]
    kind = kw.get("type", str)
    try:
        value = kind(raw)
    except argparse.ArgumentTypeError as e:  # its message quotes the value already
        raise ConfigError(f"{env} ({flag})", None, str(e)) from None
    except (TypeError, ValueError):
        raise ConfigError(f"{env} ({flag})", raw,
                          f"invalid {getattr(kind, '__name__', 'value')} value") from None
    choices = kw.get("choices")
    if choices is not None and value not in choices:
        raise ConfigError(f"{env} ({flag})", raw, f"must be one of {', '.join(choices)}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    _add(p, "--log-level", help="log level", default="info",
         choices=["debug", "info", "warning", "error"])
    _add(p, "--log-format", help="log format", default="text", choices=["text", "json"])


def _kube_flags(p: argparse.ArgumentParser, default_mode: str) -> None:
    _add(p, "--kube", help="watch UnitSignals: on, off, or auto (when a cluster is configured)",
         default=default_mode, choices=["auto", "on", "off"])
    _add(p, "--kubeconfig", help="kubeconfig file (default: in-cluster service account, else "
         "$KUBECONFIG or ~/.kube/config)", default=None)
    _add(p, "--kube-context", help="kubeconfig context", default=None)
    _add(p, "--kube-api-url", help="API server URL, bypassing kubeconfig (with "
         "--kube-token-file)", default=None)
    _add(p, "--kube-token-file", help="bearer token file for --kube-api-url (re-read when it "
         "changes)", default=None)
    _add(p, "--namespace", help="namespace to watch (repeat, or comma-separated in the env "
         "var); none: all namespaces", action="append", default=[])
    _add(p, "--label-selector", help="only UnitSignals matching this label selector",
         default=None)
    _add(p, "--kube-watch-list", help="sync UnitSignals by the streaming list (one watch with "
         "sendInitialEvents, no large LIST responses): auto (where the API server offers it, "
         "else paginated LISTs), on (only), or off (paginated LISTs)", default="auto",
         choices=list(KUBE_WATCH_LIST_CHOICES))
    _add(p, "--unitsignal-labels-allowlist", help="UnitSignal labels exported as label_<name> "
         "on zaroz_unitsignal_labels (comma-separated)", type=_csv, default=[])


def _schema(v: str) -> int | None:
    """A native histogram schema, -4..8, or `off`."""
    if v.strip().lower() in ("off", "none", "false"):
        return None
    try:
        n = int(v)
    except ValueError:
        n = 99
    if not -4 <= n <= 8:
        raise argparse.ArgumentTypeError(f"must be an integer within -4..8 or off, not {v!r}")
    return n


def _bucket_limit(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, not {v!r}")
    return n


def _native_flags(p: argparse.ArgumentParser, scope: str = "") -> None:
    where = ("computed for --format protobuf only, the one output that shows them" if scope
             else "protobuf scrapes only, but kept from the start, whatever the scrapers ask "
             "for, so that native and classic counts agree whenever protobuf is scraped")
    _add(p, "--native-histogram-schema", help="resolution of the latency histograms' native "
         f"buckets ({where}; classic buckets are unchanged): each power of two is "
         "split into 2^schema buckets, -4..8 (3: each bucket 2^(1/8) = 1.09 times the last), "
         "or off", type=_schema, default=3, scope=scope)
    _add(p, "--native-histogram-max-buckets", help="native buckets a series may hold; beyond, "
         "its resolution is halved (schema - 1, neighbours merged, counts kept, never reset) "
         "until it fits; 0: no limit", type=_bucket_limit, default=160, scope=scope)


def _csv(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _serve_flags(p: argparse.ArgumentParser, listen: str) -> None:
    _add(p, "--listen", help="address for /metrics, /healthz, /readyz", default=listen)
    _add(p, "--web-config-file", aliases=("--web.config.file",), help="exporter-toolkit web "
         "config YAML for --listen: TLS, client certificates, basic auth, headers (re-read when "
         "it or a file it names changes); none: plain HTTP", default=None)
    _add(p, "--gzip-level", help="gzip level for scrapes that accept gzip", type=int, default=1)
    _add(p, "--page-limit", help="events per route request (1..1000)", type=int, default=1000)
    _add(p, "--wait", help="long-poll seconds per route request (0..60)", type=int, default=30)
    _add(p, "--poll-interval", help="least seconds between the starts of a caught-up "
         "workload's route requests: a long poll answered with a short page waits out the "
         "rest, so that a busy fleet's pages carry several events each (fewer requests, less "
         "CPU in the exporter and the route) at the cost of up to this much added latency per "
         "event; never delays backfills, a workload that is behind (a full page) or shutdown; "
         "0: the next long poll at once", type=float, default=2.0)
    _add(p, "--request-timeout-margin", help="seconds allowed beyond --wait for a request",
         type=float, default=10.0)
    _add(p, "--backoff-max", help="longest pause between failed requests, seconds",
         type=float, default=30.0)
    _add(p, "--discovery-interval", help="seconds between workload list refreshes",
         type=float, default=60.0)
    _add(p, "--unit-idle-timeout", help="seconds without events before a unit's state is "
         "dropped, by the workload's event clock (plus wall time once its log is caught up "
         "and idle)", type=float, default=24 * 3600.0)
    _add(p, "--unit-expiry-interval", help="seconds between sweeps for idle units (and for "
         "workloads gone from the route)", type=float, default=60.0)
    _add(p, "--workload-retention", help="seconds a workload gone from the route's workload "
         "list is kept (its state, series and stored rows) before it is dropped; one listed "
         "again later starts as new, its counters at zero; 0: never dropped",
         type=float, default=WORKLOAD_RETENTION_S)
    _add(p, "--webhook-secret-file", help="file of accepted webhook secrets, one per line "
         "(repeat for rotation; re-read when changed); enables POST /v1/webhooks/events",
         action="append", default=[])
    _add(p, "--webhook-listen", help="address for POST /v1/webhooks/events on a listener of its "
         "own (no /metrics there, and no webhook on --listen), e.g. for an Ingress; none: the "
         "webhook is served on --listen", default=None)
    _add(p, "--webhook-web-config-file", aliases=("--webhook.web.config.file",),
         help="exporter-toolkit web config YAML for --webhook-listen (TLS, basic auth, "
         "headers); none: plain HTTP", default=None)
    _add(p, "--webhook-tolerance", help="seconds a webhook signature timestamp may be off",
         type=float, default=300.0)
    _add(p, "--webhook-max-body", help="largest webhook body, bytes", type=int, default=1 << 20)
    _add(p, "--webhook-gap-grace", help="seconds events wait behind a gap before the route is "
         "asked for the missing ones", type=float, default=2.0)
    _add(p, "--webhook-gap-give-up", help="seconds before a gap is given up when no route "
         "tailer can fetch it", type=float, default=60.0)
    _add(p, "--state-dir", help="directory for restart-safe checkpoints of every workload's "
         "cursor, model and counters: a LevelDB (store/) to whose log each checkpoint (at "
         "each scrape, every --checkpoint-interval and at shutdown) appends what changed since "
         "the last; a checkpoint.json or state.db of an older version is converted once; "
         "`zaroz-exporter state` checks and backs it up; none: no checkpoints", default=None)
    _add(p, "--checkpoint-interval", help="seconds after the last checkpoint (a scrape's too) "
         "before the next one: a scrape commits what changed since the last one before it is "
         "sent, so this bounds its wait; after a failed one, longer (up to 30 s) (0: only at "
         "scrapes and shutdown)",
         type=float, default=0.25)
    _add(p, "--start-from", help="where each workload's log starts: checkpoint (if any, else "
         "earliest), head, or earliest", default="checkpoint",
         choices=["checkpoint", "head", "earliest"])
    _add(p, "--otlp-endpoint", help="export each unit's lifecycle as an OTLP trace to this base "
         "URL; also on when OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set (OTEL_* variables "
         "configure protocol, headers, service name)", default=None)
    _add(p, "--otlp-max-queue-size", help="without --state-dir: spans buffered for export before "
         "drops are counted", type=int, default=65536)
    _add(p, "--otlp-max-pending-spans", help="with --state-dir: spans ended and not yet accepted "
         "by the collector (a backlog, an outage) kept at most; beyond, new spans are counted "
         "dropped and logged (docs/traces.md)", type=int, default=262144)
    _add(p, "--otlp-batch-size", help="spans per OTLP export request", type=int, default=4096)
    _add(p, "--otlp-metrics-endpoint", help="push the metrics a scrape serves over OTLP to this "
         "URL (OTLP/HTTP: a base URL gets /v1/metrics; VictoriaMetrics: "
         "http://host:8428/opentelemetry/v1/metrics), cumulative and continuous across restarts; "
         "also on when OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is set, or OTEL_EXPORTER_OTLP_ENDPOINT "
         "with OTEL_METRICS_EXPORTER=otlp (OTEL_* variables configure protocol, headers, "
         "timeout, compression, certificates; docs/otlp-metrics.md)", default=None)
    _add(p, "--otlp-metrics-interval", help="seconds between OTLP metric exports (default: "
         "OTEL_METRIC_EXPORT_INTERVAL in ms, else 60)", type=float, default=None)
    _add(p, "--otlp-metrics-max-points", help="data points per OTLP metric request at most (a "
         "request refused as too large is split further)", type=int, default=20000)
    _add(p, "--instance", help="this exporter's stable identity, OTLP's service.instance.id "
         "(default: the StatefulSet pod name in $POD_NAME, else shard-<n>)", default=None)
    _add(p, "--metric-allowlist", help="export only the metric families matching one of these "
         "regular expressions (comma-separated, matched anywhere in the name as in "
         "kube-state-metrics; ^...$ for an exact name); exclusive with --metric-denylist",
         type=_csv, default=[])
    _add(p, "--metric-denylist", help="export every metric family but those matching one of "
         "these regular expressions (comma-separated, e.g. 'zaroz_unitsignal_.*' drops every "
         "per-UnitSignal series)", type=_csv, default=[])
    _add(p, "--metric-opt-in-list", help="opt-in metric families to export (regular expressions, "
         "comma-separated): families off by default for their cost, see docs/metrics.md",
         type=_csv, default=[])
    _add(p, "--total-shards", help="number of shards; each workload is exported by one",
         type=int, default=1)
    _add(p, "--shard", help="this instance's shard ordinal (default: from the StatefulSet pod "
         "name in $POD_NAME or $HOSTNAME, else 0)", type=int, default=None)
    _native_flags(p)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="zaroz-exporter",
        formatter_class=_Formatter,
        description="Prometheus metrics for the zaroz units platform, from its event log.",
        epilog="Run `zaroz-exporter COMMAND --help` for its flags and environment variables.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # The one list of commands --help shows (their `help=`): no second list in an epilog.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    serve = sub.add_parser("serve", formatter_class=_Formatter,
                           help="serve /metrics from the event logs and UnitSignals (default)",
                           description="Tail every workload's event log and watch every "
                           "UnitSignal, and serve their metrics.")
    _add(serve, "--events-url", help="base URL of the platform's events route", default=None)
    _add(serve, "--events-token-file",
         help="file holding the route's bearer token (re-read when it changes)", default=None)
    _add(serve, "--workload", help="workload id to tail (repeat, or comma-separated in the env "
         "var); none: discover from the route's workload list", action="append", default=[])
    _serve_flags(serve, f"0.0.0.0:{DEFAULT_PORT}")
    _kube_flags(serve, "auto")
    _common(serve)

    replay = sub.add_parser(
        "replay", formatter_class=_Formatter,
        help="print the metrics, a summary or a report of saved event logs",
        description="Apply JSONL event logs (one envelope a line) and print the final exposition "
        "in Prometheus text format. Bad lines are counted, never fatal.")
    replay.add_argument("files", nargs="+", metavar="FILE", help="JSONL event logs: files "
                        "(gzip-compressed too), directories (every *.jsonl and *.jsonl.gz in "
                        "them), or - for stdin")
    _add(replay, "--workload", help="workload of every file (default: the file name without "
         ".jsonl or .jsonl.gz; stdin: stdin)", default=None, scope="REPLAY_")
    _add(replay, "--summary", help="print count, p50, p95, p99 and anomaly counts instead",
         action="store_true", default=False, scope="REPLAY_")
    _add(replay, "--format", help="exposition format: text (0.0.4), openmetrics, or protobuf "
         "(delimited MetricFamily messages, with native histograms: see --native-histogram-*)",
         default="text", choices=["text", "openmetrics", "protobuf"], scope="REPLAY_")
    _add(replay, "--openmetrics", help="the same as --format openmetrics",
         action="store_true", default=False, scope="REPLAY_")
    _native_flags(replay, scope="REPLAY_")
    _add(replay, "--otlp-endpoint", help="also export each unit's lifecycle as an OTLP trace "
         "to this base URL (as OTEL_EXPORTER_OTLP_ENDPOINT)", default=None, scope="REPLAY_")
    _add(replay, "--report", help="also write a self-contained HTML incident report to this "
         "file (distributions, trends, slowest units' timelines, anomalies)", default=None,
         scope="REPLAY_")
    _add(replay, "--explain", help="print file:line and the schema's reason for each invalid "
         "line on stderr", action="store_true", default=False, scope="REPLAY_")
    _add(replay, "--explain-max", help="invalid lines explained at most (the rest are counted)",
         type=int, default=20, scope="REPLAY_")

    demo = sub.add_parser("demo", formatter_class=_Formatter,
                          help="a simulated platform and the exporter, on loopback",
                          description="Start the simulator's events route and the exporter "
                          "tailing it, print the URLs, serve live metrics until interrupted.")
    _serve_flags(demo, f"127.0.0.1:{DEFAULT_PORT}")
    _add(demo, "--route-listen", help="address of the simulated events route",
         default="127.0.0.1:0")
    _add(demo, "--workloads", help="simulated workloads", type=int, default=3)
    _add(demo, "--rate", help="unit arrivals per second per workload", type=float, default=2.0)
    _add(demo, "--seed", help="random seed of the simulation", type=int, default=1)
    _add(demo, "--faults", help="inject random route faults (5xx, 429, drops)",
         action="store_true", default=False)
    _add(demo, "--duration", help="stop after this many seconds (0: run until interrupted)",
         type=float, default=0.0)
    _add(demo, "--history", help="seconds of simulated history written at start, so the "
         "overview has data at once", type=float, default=300.0)
    _common(demo)
    _state_commands(sub)
    return parser


def _state_commands(sub: Any) -> None:
    """`state check DIR` and `state backup DIR DEST`: a state dir looked after, live."""
    state = sub.add_parser(
        "state", formatter_class=_Formatter,
        help="check or back up a --state-dir, also while its exporter runs",
        description="Look after a --state-dir without stopping the exporter that uses it (its "
        "lock is not needed). Restore: docs/operations.md#backup-and-restore.")
    actions = state.add_subparsers(dest="action", metavar="ACTION", title="actions",
                                   required=True)
    check = actions.add_parser(
        "check", formatter_class=_Formatter,
        help="integrity, format version and contents of a state dir",
        description="Check a state dir: the store's integrity (every page and row read, and "
        "decoded), its format version, and what it holds (workloads, units, series, cursors, "
        "events waiting behind a gap, open traces and spans not yet handled), and every other "
        "file in it. Exit code 0: sound; 1: problems (listed); 2: usage.")
    check.add_argument("dir", metavar="DIR", help="the --state-dir")
    _add(check, "--output", help="output format", default="text", choices=["text", "json"],
         scope="STATE_")
    _add(check, "--verbose", help="also each workload's cursor, units and pending events",
         action="store_true", default=False, scope="STATE_")
    backup = actions.add_parser(
        "backup", formatter_class=_Formatter,
        help="a consistent copy of a state dir, also while its exporter runs",
        description="Copy what a restore needs from a state dir into DEST: the store's last "
        "committed checkpoint (one consistent snapshot, taken while the exporter goes on "
        "writing) and the trace outbox's mark; the copy is then checked as `state check` "
        "does. Restore by copying DEST's files into an empty --state-dir before the exporter "
        "starts. Exit code 0: copied and sound; 1: not copied, or the copy has problems; "
        "2: usage (DEST must be empty or absent).")
    backup.add_argument("dir", metavar="DIR", help="the --state-dir")
    backup.add_argument("dest", metavar="DEST", help="an empty or absent directory")
    _add(backup, "--output", help="output format", default="text", choices=["text", "json"],
         scope="STATE_")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "serve")
    serve_config = None
    try:
        args = build_parser().parse_args(argv)
        if args.command in ("serve", "demo"):  # replay needs none of the checks: not imported
            from exporter.commands import config

            if args.command == "serve":
                serve_config = config.ServeConfig.from_args(args)
            else:
                config.validate_common(args)
    except ConfigError as e:
        print(e.line(argv[0] if argv and not argv[0].startswith("-") else ""), file=sys.stderr)
        return 2
    if args.command == "state":
        return _state(args)
    if args.command == "replay":
        from exporter.commands import replay
        from exporter.sinks.metrics.exposition import Format
        from exporter.sinks.metrics.native import NativeConfig

        fmt = Format(args.format)
        if args.openmetrics:
            if fmt is Format.PROTOBUF:  # a configuration mistake: one line, exit code 2
                print(ConfigError("--openmetrics", None, "contradicts --format protobuf")
                      .line("replay"), file=sys.stderr)
                return 2
            fmt = Format.OPENMETRICS
        return replay.run(args.files, args.workload, args.summary, fmt,
                          otlp_endpoint=args.otlp_endpoint, report=args.report,
                          explain=args.explain, explain_max=args.explain_max,
                          native=NativeConfig.from_flags(args.native_histogram_schema,
                                                         args.native_histogram_max_buckets))
    from exporter.commands import logs

    logs.setup(args.log_level, args.log_format)
    if serve_config is not None:
        from exporter.commands import serve

        return serve.main(serve_config)
    from exporter.commands import demo

    return demo.main(args)


def _state(args: argparse.Namespace) -> int:
    import sqlite3

    from exporter.commands import state

    prog = f"zaroz-exporter state {args.action}"
    try:
        if args.action == "check":
            return state.run_check(args.dir, args.output, args.verbose)
        return state.run_backup(args.dir, args.dest, args.output)
    except state.UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return state.USAGE
    except (OSError, sqlite3.Error) as e:
        print(f"{prog}: error: {e.__class__.__name__}: {e}", file=sys.stderr)
        return state.PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
