"""The validated configuration of `serve` and `demo`, checked before anything starts.

A configuration mistake must end the process at once with one line on stderr naming the flag, the
value and the cause (exit code 2), not a traceback after sessions and listeners were opened, and
not a warning followed by a process that runs forever unready. So every flag is checked here,
before logging, the event loop, or any client exists: addresses are parsed and bound once (a port
in use is found now), files named explicitly are opened, directories created, URLs parsed, and the
Kubernetes access loaded. `ServeConfig.from_args` runs the checks once and keeps what they found
(the parsed listen address, the Kubernetes access, the web configs), typed: `serve.start` takes
that object and nothing else, so nothing is parsed or checked twice.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from exporter.commands.errors import ConfigError
from exporter.model.sharding import Shard, ordinal_from_pod_name
from exporter.sinks.metrics.native import NativeConfig
from exporter.sinks.metrics.selection import FamilyFilter, FamilyListError
from exporter.vocabulary import WORKLOAD_RETENTION_S

if TYPE_CHECKING:  # imported where used: kubernetes takes ~0.9 s, aiohttp ~0.2 s (replay
    # needs neither)
    from exporter.sources.kube.config import KubeAccess
    from exporter.web.security import WebSecurity

_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")


def _errno(e: OSError) -> str:
    return e.strerror or e.__class__.__name__


def parse_listen(flag: str, value: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port` or `:port` -> (host, port); a host that is no address nor
    host name is an error (a lookup of `999.1.1.1` would fail late and obscurely)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(flag, value, "not host:port (port 0..65535), e.g. 0.0.0.0:9817")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if re.fullmatch(r"[0-9.]+", host):
                raise ConfigError(flag, value, f"{host} is not an IPv4 address") from None
            if not _HOSTNAME.fullmatch(host):
                raise ConfigError(flag, value, f"{host!r} is not an IP address or host name") \
                    from None
    return host or "0.0.0.0", int(port)


def check_bind(flag: str, value: str, host: str, port: int) -> None:
    """Bind the address once (with SO_REUSEADDR, as aiohttp does) and let go: a port in use or
    an address not on this host is then a configuration error, found before anything starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise ConfigError(flag, value, f"cannot resolve {host}: {e.strerror}") from None
    for family, kind, proto, _, addr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
                s.listen(1)
            except OSError as e:
                raise ConfigError(flag, value, f"cannot listen: {_errno(e)}") from None


def check_url(flag: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(flag, value, "not an http:// or https:// URL")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as e:
        raise ConfigError(flag, value, f"bad port: {e}") from None
    return value


def check_readable_file(flag: str, value: str) -> None:
    try:
        with open(value, "rb") as f:
            f.read(1)
    except IsADirectoryError:
        raise ConfigError(flag, value, "is a directory, not a file") from None
    except OSError as e:
        raise ConfigError(flag, value, f"cannot read: {_errno(e)}") from None


def check_state_dir(flag: str, value: str) -> None:
    """Created when missing; it must then be a directory this process can write."""
    p = Path(value)
    if p.exists() and not p.is_dir():
        raise ConfigError(flag, value, "exists and is not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(flag, value, f"cannot create: {_errno(e)}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise ConfigError(flag, value, "not writable by this process")


def web_security(flag: str, path: str | None, name: str) -> WebSecurity:
    """The listener's web config in force (exporter.web.security.WebSecurity), loaded now."""
    from exporter.web.config import WebConfigError
    from exporter.web.security import WebSecurity

    try:
        return WebSecurity(path, name)
    except WebConfigError as e:
        raise ConfigError(flag, path, str(e)) from None


def _webhook_listener(args: argparse.Namespace, bind: bool) -> None:
    """--webhook-listen: its own address and web config; adds `webhook_addr`, `webhook_security`
    (None without --webhook-listen)."""
    listen = getattr(args, "webhook_listen", None)
    web_config = getattr(args, "webhook_web_config_file", None)
    if not listen:
        if web_config:
            raise ConfigError("--webhook-web-config-file", web_config,
                              "needs --webhook-listen (the webhook has no listener of its own)")
        args.webhook_addr = args.webhook_security = None
        return
    if not args.webhook_secret_file:
        raise ConfigError("--webhook-listen", listen, "needs --webhook-secret-file")
    host, port = parse_listen("--webhook-listen", listen)
    if port != 0 and (host, port) == args.listen_addr:
        raise ConfigError("--webhook-listen", listen, "is the --listen address")
    if bind and port != 0:
        check_bind("--webhook-listen", listen, host, port)
    args.webhook_addr = (host, port)
    if getattr(args, "webhook_security", None) is None:
        args.webhook_security = web_security("--webhook-web-config-file", web_config, "webhook")


def family_filter(args: argparse.Namespace) -> FamilyFilter:
    """--metric-allowlist/-denylist/-opt-in-list as a sinks.metrics.selection.FamilyFilter."""
    try:
        return FamilyFilter.parse(getattr(args, "metric_allowlist", None) or (),
                                  getattr(args, "metric_denylist", None) or (),
                                  getattr(args, "metric_opt_in_list", None) or ())
    except FamilyListError as e:
        raise ConfigError(e.flag, e.value, e.cause) from None


def _range(args: argparse.Namespace, name: str, lo: float | None, hi: float | None,
           what: str) -> None:
    v = getattr(args, name, None)
    if v is None:
        return
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigError("--" + name.replace("_", "-"), v, f"must be {what}")


# (attribute, lowest, highest, how it is said); None: unbounded on that side
RANGES: tuple[tuple[str, float | None, float | None, str], ...] = (
    ("page_limit", 1, 1000, "within 1..1000"),
    ("wait", 0, 60, "within 0..60"),
    ("poll_interval", 0, 60, "within 0..60 (0: no pacing)"),
    ("gzip_level", 0, 9, "within 0..9"),
    ("request_timeout_margin", 0.001, None, "positive"),
    ("backoff_max", 0.001, None, "positive"),
    ("discovery_interval", 0.001, None, "positive"),
    ("unit_idle_timeout", 0.001, None, "positive"),
    ("unit_expiry_interval", 0.001, None, "positive"),
    ("workload_retention", 0, None, "0 (never) or more"),
    ("checkpoint_interval", 0, None, "0 (only at scrapes and shutdown) or more"),
    ("webhook_tolerance", 0.001, None, "positive"),
    ("webhook_max_body", 1, None, "positive"),
    ("webhook_gap_grace", 0, None, "0 or more"),
    ("webhook_gap_give_up", 0.001, None, "positive"),
    ("otlp_max_queue_size", 1, None, "positive"),
    ("otlp_max_pending_spans", 1, None, "positive"),
    ("otlp_batch_size", 1, None, "positive"),
    ("otlp_metrics_interval", 0.001, None, "positive"),
    ("otlp_metrics_max_points", 1, None, "positive"),
    ("total_shards", 1, None, "1 or more"),
)


def shard_of(args: argparse.Namespace, environ: Mapping[str, str]) -> Shard:
    """--shard, else the ordinal of a StatefulSet pod name, else 0."""
    index = args.shard
    if index is None and args.total_shards > 1:
        pod = environ.get("POD_NAME") or environ.get("HOSTNAME")
        index = ordinal_from_pod_name(pod)
        if index is None:
            raise ConfigError("--shard", None, f"--total-shards {args.total_shards} needs "
                              "--shard or a StatefulSet pod name (<name>-<ordinal>) in $POD_NAME "
                              f"or $HOSTNAME (got {pod!r})")
    try:
        return Shard(index or 0, args.total_shards)
    except ValueError as e:
        raise ConfigError("--shard", index, str(e)) from None


def _kube_access(args: argparse.Namespace, environ: Mapping[str, str]) -> KubeAccess | None:
    """The Kubernetes access `--kube` asks for, or None (auto with no cluster configured).

    Paths given explicitly must exist even under auto: a typo in --kubeconfig must not silently
    turn the UnitSignal watch off."""
    if getattr(args, "kube", "off") == "off":
        return None
    for flag, name in (("--kubeconfig", "kubeconfig"), ("--kube-token-file", "kube_token_file")):
        if getattr(args, name, None):
            check_readable_file(flag, getattr(args, name))
    api_url = getattr(args, "kube_api_url", None)
    if api_url:
        check_url("--kube-api-url", api_url)
    from exporter.sources.kube.config import KubeConfigError, load_access

    explicit = [f for f, n in (("--kube-api-url", "kube_api_url"), ("--kubeconfig", "kubeconfig"),
                               ("--kube-context", "kube_context"),
                               ("--kube-token-file", "kube_token_file"))
                if getattr(args, n, None)]
    try:
        return load_access(api_url=api_url, token_file=getattr(args, "kube_token_file", None),
                           kubeconfig=getattr(args, "kubeconfig", None),
                           context=getattr(args, "kube_context", None),
                           environ=environ)
    except KubeConfigError as e:
        if args.kube == "on" or explicit:
            flag = explicit[0] if explicit else "--kube"
            value = getattr(args, flag.lstrip("-").replace("-", "_"))
            raise ConfigError(flag, value, f"no Kubernetes access: {e}") from None
        args.kube_skipped = str(e)  # auto and nothing configured: said once at start
        return None


def validate_common(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
                    *, bind: bool = True) -> argparse.Namespace:
    """The flags `serve` and `demo` share; raises ConfigError. Adds `listen_addr` and
    `shard_config` to `args`."""
    env = os.environ if environ is None else environ
    for name, lo, hi, what in RANGES:
        _range(args, name, lo, hi, what)
    host, port = parse_listen("--listen", args.listen)
    if bind and port != 0:
        check_bind("--listen", args.listen, host, port)
    args.listen_addr = (host, port)
    if not hasattr(args, "web_security"):
        args.web_security = web_security("--web-config-file",
                                         getattr(args, "web_config_file", None), "metrics")
    for f in args.webhook_secret_file:
        check_readable_file("--webhook-secret-file", f)
    _webhook_listener(args, bind)
    if args.state_dir:
        check_state_dir("--state-dir", args.state_dir)
    if args.otlp_endpoint:
        check_url("--otlp-endpoint", args.otlp_endpoint)
    _otlp_metrics(args, env)
    args.shard_config = shard_of(args, env)
    args.family_filter = family_filter(args)
    return args


def _otlp_metrics(args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """--otlp-metrics-*: the endpoint a URL, the interval from OTEL_METRIC_EXPORT_INTERVAL
    when not given, the protocol one the exporter speaks."""
    if getattr(args, "otlp_metrics_endpoint", None):
        check_url("--otlp-metrics-endpoint", args.otlp_metrics_endpoint)
    if getattr(args, "otlp_metrics_interval", None) is None:
        from exporter.sinks.otelenv import interval_from_env

        try:
            args.otlp_metrics_interval = interval_from_env(env)
        except ValueError as e:
            raise ConfigError("--otlp-metrics-interval", None, str(e)) from None
    from exporter.sinks.metrics.otlp.transport import enabled, protocol

    if enabled(getattr(args, "otlp_metrics_endpoint", None), env):
        try:
            protocol()
        except ValueError as e:
            raise ConfigError("--otlp-metrics-endpoint", args.otlp_metrics_endpoint, str(e)
                              ) from None


def validate(args: argparse.Namespace, environ: Mapping[str, str] | None = None,
             *, bind: bool = True) -> argparse.Namespace:
    """Every `serve` flag; raises ConfigError. Adds `kube_access` too (computed once: None when
    --kube is off, or auto with no cluster configured)."""
    env = os.environ if environ is None else environ
    validate_common(args, env, bind=bind)
    if args.events_url:
        check_url("--events-url", args.events_url)
    if getattr(args, "events_token_file", None):
        check_readable_file("--events-token-file", args.events_token_file)
    if args.start_from == "head" and not args.events_url:
        raise ConfigError("--start-from", "head", "needs the events route (--events-url)")
    if not hasattr(args, "kube_access"):
        args.kube_access = _kube_access(args, env)
    if not (args.events_url or args.kube_access is not None or args.webhook_secret_file):
        raise ConfigError("--events-url", None, "nothing to export: give --events-url "
                          "(ZAROZ_EXPORTER_EVENTS_URL), --webhook-secret-file, and/or a "
                          "Kubernetes configuration")
    return args


@dataclass(frozen=True)
class ServeConfig:
    """Everything `serve` reads, checked once by `from_args` and typed; `start` takes only this,
    so nothing after it re-parses a flag or raises for a value it could have refused here."""

    events_url: str | None
    events_token_file: str | None
    workload: tuple[str, ...]
    listen: str
    listen_addr: tuple[str, int]
    web_security: WebSecurity
    gzip_level: int
    page_limit: int
    wait: int
    poll_interval: float
    request_timeout_margin: float
    backoff_max: float
    discovery_interval: float
    unit_idle_timeout: float
    unit_expiry_interval: float
    workload_retention: float
    webhook_secret_file: tuple[str, ...]
    webhook_listen: str | None
    webhook_security: WebSecurity | None
    webhook_tolerance: float
    webhook_max_body: int
    webhook_gap_grace: float
    webhook_gap_give_up: float
    state_dir: str | None
    checkpoint_interval: float
    start_from: str
    otlp_endpoint: str | None
    otlp_max_queue_size: int
    otlp_max_pending_spans: int
    otlp_batch_size: int
    otlp_metrics_endpoint: str | None
    otlp_metrics_interval: float
    otlp_metrics_max_points: int
    instance: str | None
    family_filter: FamilyFilter
    shard_config: Shard
    native: NativeConfig | None
    kube: str
    kube_access: KubeAccess | None
    kube_skipped: str
    namespace: tuple[str, ...]
    label_selector: str | None
    kube_watch_list: str
    unitsignal_labels_allowlist: tuple[str, ...]

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None,
                  *, bind: bool = True) -> ServeConfig:
        """Check every flag (ConfigError names the first that cannot work), then keep them."""
        validate(args, environ, bind=bind)
        values: dict[str, Any] = {f.name: getattr(args, f.name, None) for f in fields(cls)}
        for name in _REPEATED:  # lists from argparse (or absent: the demo's), kept immutable
            values[name] = tuple(values[name] or ())
        values["native"] = native_config(args)
        values["kube_skipped"] = values["kube_skipped"] or ""  # set only when auto skipped
        values["kube_watch_list"] = values["kube_watch_list"] or "auto"  # the demo has no flag
        if values["workload_retention"] is None:  # the demo has no flag
            values["workload_retention"] = WORKLOAD_RETENTION_S
        return cls(**values)


# ServeConfig's fields that flags give as lists (action="append" or comma-separated).
_REPEATED = ("workload", "webhook_secret_file", "namespace", "unitsignal_labels_allowlist")


def native_config(args: argparse.Namespace) -> NativeConfig | None:
    """The registry's NativeConfig from the --native-histogram-* flags (None: classic only)."""
    return NativeConfig.from_flags(args.native_histogram_schema,
                                   args.native_histogram_max_buckets)
