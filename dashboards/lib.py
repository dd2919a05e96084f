"""Building blocks shared by the dashboards: catalog-checked PromQL, panels, variables, layout.

Every metric name in a dashboard comes through `select`/`metric` here, which look it up in
`exporter.catalog` (or `alerts.recording` for recorded names), so a renamed or removed metric
fails at generation time instead of leaving an empty panel in front of an operator.

grafanalib (0.7) writes the Grafana 7-era panel model: it cannot express a few current fields
(Prometheus `exemplar`/`range`, variable `description`, the React heatmap's options) and writes
`null` or long-removed keys for others. Missing fields are added through grafanalib's own
extension points (subclasses that extend `to_json_data`, and `extraJson`); what it writes in
excess is removed by the one normalising step, `normalise`, which is documented key by key.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attr
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from alerts import recording
from alerts.config import DEFAULT_CONFIG, Config
from exporter import catalog

# The Grafana JSON model version the dashboards are written for (Grafana 10.4 / 11). Grafana
# migrates older models on load, and the schema check in tests/ validates against current types.
SCHEMA_VERSION = 39

TAGS = ["zaroz"]

# Template variable names; panels refer to them as `$name`.
DATASOURCE_VAR = "datasource"
CLUSTER_VAR = "cluster"
EXPORTER_VAR = "exporter"  # the exporter's base URL, for links to its overview page
TRACING_VAR = "tracing"
WORKLOAD_VAR = "workload"
NAMESPACE_VAR = "namespace"

PROMETHEUS = {"type": "prometheus", "uid": f"${{{DATASOURCE_VAR}}}"}

# The rules' configuration (alerts.config.Config) the dashboards are built for, set around a
# build by `configured`: its cluster label (kubernetes-mixin's clusterLabel, as the rules keep
# it), the exporter's scrape selector, and the native-histogram switch. Every selector is
# filtered by the `$cluster` variable; where series carry no such label the variable has no
# values, its value is empty and `=~""` matches them all. The mixin builds them with a symbolic
# Config (alerts.template), whose values then read jsonnet's `_config`.
CLUSTER = f'=~"${CLUSTER_VAR}"'
# Where the overview page is when nobody set the variable: the demo, or a port-forward.
EXPORTER_URL = "http://localhost:9817"

# Native histograms (Config.native_histograms): dashboards read the latency histograms as native
# histograms (heatmaps and raw quantiles from the histogram series itself); recorded quantiles
# keep their names, the native rules record them.
_CONFIG: contextvars.ContextVar[Config] = contextvars.ContextVar("config", default=DEFAULT_CONFIG)
NATIVE_SUFFIX = "-native"


@contextlib.contextmanager
def configured(config: Config) -> Iterator[None]:
    token = _CONFIG.set(config)
    try:
        yield
    finally:
        _CONFIG.reset(token)


def is_native() -> bool:
    return bool(_CONFIG.get().native_histograms)


def cluster_label() -> str:
    return f"{_CONFIG.get().cluster_label}"


def exporter_selector() -> str:
    """The matchers selecting the exporter's own series (`job="zaroz-exporter"`)."""
    return f"{_CONFIG.get().job_selector}"


# Label matchers for the template variables (regex: multi-value and All expand to alternations).
WORKLOAD = f'=~"${WORKLOAD_VAR}"'
NAMESPACE = f'=~"${NAMESPACE_VAR}"'

# Grafana's own rate window: at least four scrape intervals, so a rate never has < 2 samples.
RATE = "$__rate_interval"

# Unit ids Grafana knows that these dashboards use (the test refuses any other spelling).
UNITS = frozenset({"s", "short", "bytes", "percentunit", "cps", "none"})


# --- PromQL, checked against the catalog -----------------------------------------------------

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric(name: str, suffix: str = "") -> catalog.Metric:
    """The catalog entry for `name`, refusing a suffix its kind does not expose."""
    try:
        m = catalog.get(name)
    except KeyError:
        raise KeyError(f"{name} is not in exporter.catalog") from None
    if suffix and (m.kind is not catalog.Kind.HISTOGRAM or suffix not in _HISTOGRAM_SUFFIXES):
        raise ValueError(f"{name} ({m.kind}) has no {suffix} series")
    if m.kind is catalog.Kind.HISTOGRAM and not suffix:
        raise ValueError(f"{name} is a histogram: select its _bucket, _sum or _count")
    return m


def select(name: str, suffix: str = "", **matchers: str) -> str:
    """`name{label<op>"value", ...}` for a catalog metric, refusing labels it does not carry.

    `matchers` map a label to its operator and quoted value, e.g. `workload=WORKLOAD` or
    `outcome=one_of(...)`; `le` is allowed on histogram buckets.
    """
    m = metric(name, suffix)
    allowed = set(m.labels) | ({"le"} if suffix == "_bucket" else set())
    unknown = set(matchers) - allowed
    if unknown:
        raise ValueError(f"{name} has no label(s) {sorted(unknown)}; it has {m.labels}")
    matchers = {cluster_label(): CLUSTER, **matchers}  # Prometheus adds the label, not us
    inner = ", ".join(f"{k}{v}" for k, v in matchers.items())
    return f"{name}{suffix}{{{inner}}}" if inner else f"{name}{suffix}"


def native_histogram(name: str, **matchers: str) -> str:
    """A native histogram series, `name{...}` (no suffix, no `le`), checked like `select`."""
    m = catalog.get(name)
    if m.kind is not catalog.Kind.HISTOGRAM:
        raise ValueError(f"{name} ({m.kind}) is not a histogram")
    unknown = set(matchers) - set(m.labels)
    if unknown:
        raise ValueError(f"{name} has no label(s) {sorted(unknown)}; it has {m.labels}")
    matchers = {cluster_label(): CLUSTER, **matchers}  # as select() does
    inner = ", ".join(f"{k}{v}" for k, v in matchers.items())
    return f"{name}{{{inner}}}"


def recorded(name: str, **matchers: str) -> str:
    """A recording rule's series, refusing names `alerts.recording` does not record."""
    if name not in recording.recording_names():
        raise KeyError(f"{name} is not a recording rule in alerts/recording.py")
    matchers = {cluster_label(): CLUSTER, **matchers}  # every rule keeps the cluster label
    inner = ", ".join(f"{k}{v}" for k, v in matchers.items())
    return f"{name}{{{inner}}}" if inner else name


def eq(value: str, allowed: Iterable[str] | None = None) -> str:
    """`="value"`, refusing a value outside the catalog's bounded set when one is given."""
    if allowed is not None and value not in set(allowed):
        raise ValueError(f"{value!r} is not one of {sorted(allowed)}")
    return f'="{value}"'


def one_of(values: Sequence[str], allowed: Iterable[str]) -> str:
    """`=~"a|b"` for values of a bounded label, each checked against the catalog's set."""
    bad = set(values) - set(allowed)
    if bad:
        raise ValueError(f"{sorted(bad)} not in {sorted(allowed)}")
    return '=~"' + "|".join(values) + '"'


def rate(series: str) -> str:
    """`rate(series[$__rate_interval])`."""
    return f"rate({series}[{RATE}])"


def quantile_raw(q: float, name: str, by: Sequence[str], **matchers: str) -> str:
    """`histogram_quantile` over a histogram's buckets, for quantiles no recording rule keeps."""
    if is_native():
        return (f"histogram_quantile({q}, sum by ({', '.join(by)}) "
                f"({rate(native_histogram(name, **matchers))}))")
    labels = ", ".join([*by, "le"])
    bucket = select(name, "_bucket", **matchers)
    return f"histogram_quantile({q}, sum by ({labels}) ({rate(bucket)}))"


def quantile_targets(histogram: str, **matchers: str) -> list[PromTarget]:
    """p50/p95/p99 per workload from the recording rules in alerts/recording.py."""
    out = []
    for i, key in enumerate(recording.QUANTILES):
        name = recording.quantile_name(histogram, key)
        out.append(
            PromTarget(
                expr=recorded(name, **matchers),
                legendFormat=f"{{{{workload}}}} {key}",
                refId=chr(ord("A") + i),
            )
        )
    return out


# --- grafanalib extensions -------------------------------------------------------------------


@attr.s
class PromTarget(g.Target):
    """A Prometheus query as Grafana 10 stores it.

    grafanalib's Target has no `exemplar` or `range` and writes `datasource: null`; Grafana needs
    the datasource reference on each query for the `$datasource` variable to apply to it. It
    also writes Graphite's `target`/`metric`, a `query` copy of `expr`, and the legacy `step` and
    `intervalFactor: 2` (which would halve every panel's resolution): those are left out.
    """

    exemplar: bool = attr.ib(default=False)

    def to_json_data(self) -> dict[str, Any]:
        data = super().to_json_data()
        for legacy in ("target", "metric", "query", "step", "intervalFactor"):
            del data[legacy]
        data.update(
            datasource=PROMETHEUS,
            exemplar=self.exemplar,
            range=not self.instant,
            editorMode="code",
        )
        return data


@attr.s
class Variable(g.Template):
    """A template variable with the `description` and explicit `current` grafanalib lacks.

    grafanalib derives `current` from `default` with `text: null` when there is none; Grafana's
    schema requires `text` and `value`, and a multi-value variable stores lists.
    """

    description: str = attr.ib(default="")
    current: dict[str, Any] | None = attr.ib(default=None)

    def to_json_data(self) -> dict[str, Any]:
        data = super().to_json_data()
        data["description"] = self.description
        if self.current is not None:
            data["current"] = self.current
        return data


@attr.s
class Heatmap(g.Panel):
    """Grafana's React heatmap (8.5+) over pre-bucketed Prometheus data.

    grafanalib's Heatmap writes the removed Angular model (`cards`, `xAxis`, `dataFormat`, ...);
    this extends grafanalib's Panel instead so the options are the ones Grafana reads today.
    """

    unit: str = attr.ib(default="s")

    def to_json_data(self) -> dict[str, Any]:
        return self.panel_json(
            {
                "type": "heatmap",
                "fieldConfig": {
                    "defaults": {
                        "unit": "short",
                        "custom": {
                            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                            "scaleDistribution": {"type": "linear"},
                        },
                    },
                    "overrides": [],
                },
                "options": {
                    "calculate": False,
                    "cellGap": 1,
                    "color": {
                        "mode": "scheme",
                        "scheme": "Oranges",
                        "scale": "exponential",
                        "exponent": 0.5,
                        "steps": 64,
                        "fill": "dark-orange",
                        "reverse": False,
                    },
                    "exemplars": {"color": "rgba(255,0,255,0.7)"},
                    "filterValues": {"le": 1e-9},
                    "legend": {"show": True},
                    "rowsFrame": {"layout": "auto"},
                    "tooltip": {"mode": "single", "yHistogram": True, "showColorScale": False},
                    "yAxis": {"axisPlacement": "left", "reverse": False, "unit": self.unit},
                },
            }
        )


# --- panels ----------------------------------------------------------------------------------


def _ids(targets: Sequence[PromTarget]) -> list[PromTarget]:
    """Give targets without a refId the next letter, so Grafana does not renumber on save."""
    return [
        t if t.refId else attr.evolve(t, refId=chr(ord("A") + i)) for i, t in enumerate(targets)
    ]


def target(expr: str, legend: str = "", **kwargs: Any) -> PromTarget:
    """A range query with a legend."""
    return PromTarget(expr=expr, legendFormat=legend, **kwargs)


def rate_by(by: Sequence[str], name: str, legend: str | None = None,
            **matchers: str) -> PromTarget:
    """`sum by (by) (rate(name{matchers}[...]))`, its legend the same labels unless given."""
    expr = f"sum by ({', '.join(by)}) ({rate(select(name, **matchers))})"
    return target(expr, " ".join(f"{{{{{b}}}}}" for b in by) if legend is None else legend)


def timeseries(
    title: str,
    description: str,
    targets: Sequence[PromTarget],
    unit: str,
    *,
    stacked: bool = False,
    links: Sequence[dict[str, Any]] = (),
) -> g.TimeSeries:
    """A time series panel with a table legend showing mean and max (what an on-call scans)."""
    if not description:
        raise ValueError(f"panel {title!r} needs a description")
    if any("{{workload}}" in (t.legendFormat or "") for t in targets):
        links = [*links, *workload_links()]
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=PROMETHEUS,
        targets=_ids(targets),
        unit=unit,
        fillOpacity=25 if stacked else 10,
        stacking={"mode": "normal", "group": "A"} if stacked else {"mode": "none"},
        legendDisplayMode="table",
        legendCalcs=["mean", "max", "lastNotNull"],
        tooltipMode="multi",
        tooltipSort="desc",
        valueMin=0,
        maxDataPoints=None,
        thresholds=[{"color": "green", "value": None}],
        extraJson={"fieldConfig": {"defaults": {"links": list(links)}}} if links else None,
    )


def heatmap(
    title: str, description: str, histogram: str, unit: str = "s", **matchers: str
) -> Heatmap:
    """Observations per bucket per interval, with exemplars (the unit's trace) on top. Native:
    the summed native histogram itself, which Grafana (10+) draws at its own resolution; no
    exemplars (Prometheus 2.42 keeps none for native histograms)."""
    if is_native():
        return Heatmap(
            title=title,
            description=description,
            dataSource=PROMETHEUS,
            unit=unit,
            maxDataPoints=60,
            targets=[
                PromTarget(
                    expr=f"sum(increase({native_histogram(histogram, **matchers)}[{RATE}]))",
                    format="heatmap",
                    refId="A",
                )
            ],
        )
    bucket = select(histogram, "_bucket", **matchers)
    return Heatmap(
        title=title,
        description=description,
        dataSource=PROMETHEUS,
        unit=unit,
        maxDataPoints=60,
        targets=[
            PromTarget(
                expr=f"sum by (le) (increase({bucket}[{RATE}]))",
                legendFormat="{{le}}",
                format="heatmap",
                exemplar=True,
                refId="A",
            )
        ],
    )


def table(
    title: str,
    description: str,
    targets: Sequence[PromTarget],
    columns: dict[str, tuple[str, str]],
    *,
    hide: Sequence[str] = ("Time", "__name__", "job", "instance"),
    mappings: dict[str, list[dict[str, Any]]] | None = None,
) -> g.Table:
    """An instant-query table: one row per label set, one column per query.

    `columns` maps a query's refId to (column title, unit); Grafana names the value fields
    `Value #<refId>` after the `merge` transformation, which the `organize` step renames.
    """
    targets = [attr.evolve(t, instant=True, format="table") for t in _ids(targets)]
    rename = {f"Value #{ref}": name for ref, (name, _) in columns.items()}
    overrides = [
        {
            "matcher": {"id": "byName", "options": name},
            "properties": [{"id": "unit", "value": unit}]
            + [{"id": "mappings", "value": m} for m in [(mappings or {}).get(ref)] if m],
        }
        for ref, (name, unit) in columns.items()
    ]
    return g.Table(
        title=title,
        description=description,
        dataSource=PROMETHEUS,
        targets=targets,
        maxDataPoints=None,
        unit="short",
        overrides=overrides,
        filterable=True,
        thresholds=[{"color": "green", "value": None}],
        sortBy=[g.TableSortByField(displayName=next(iter(rename.values())), desc=True)],
        transformations=[
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": dict.fromkeys(hide, True),
                    "renameByName": rename,
                },
            },
        ],
    )


# --- variables -------------------------------------------------------------------------------


def datasource_variable(name: str, plugin: str, label: str, description: str) -> Variable:
    """A datasource picker; `default` selects the instance's default Prometheus."""
    value = "default" if plugin == "prometheus" else ""
    return Variable(
        name=name,
        label=label,
        type="datasource",
        query=plugin,
        description=description,
        current={"selected": False, "text": value, "value": value},
        regex="",
    )


def query_variable(name: str, label: str, source: str, description: str) -> Variable:
    """A multi-value label picker with All, from `label_values(<source>, <name>)`.

    All becomes `.+` rather than a list of every value: the query stays short however many
    workloads there are, and series with the label present always match.
    """
    m = metric(source, "_count" if catalog.get(source).kind is catalog.Kind.HISTOGRAM else "")
    if name not in m.labels:
        raise ValueError(f"{source} has no label {name}")
    return Variable(
        name=name,
        label=label,
        query={"query": f"label_values({source}, {name})", "refId": f"{name}-values"},
        dataSource=PROMETHEUS,
        multi=True,
        includeAll=True,
        allValue=".+",
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=g.SORT_ALPHA_IGNORE_CASE_ASC,
        description=description,
        current={"selected": True, "text": ["All"], "value": ["$__all"]},
        regex="",
    )


def cluster_variable() -> Variable:
    """One cluster at a time (kubernetes-mixin's `$cluster`), from the exporter's build info.

    Without a cluster label on the series there are no values: the variable is empty and its
    matcher `=~""` selects the series that lack the label, i.e. all of them.
    """
    source = select("zaroz_exporter_build_info").split("{", 1)[0]
    return Variable(
        name=CLUSTER_VAR,
        label="Cluster",
        query={"query": f"label_values({source}, {cluster_label()})",
               "refId": f"{CLUSTER_VAR}-values"},
        dataSource=PROMETHEUS,
        multi=False,
        includeAll=False,
        refresh=g.REFRESH_ON_TIME_RANGE_CHANGE,
        sort=g.SORT_ALPHA_IGNORE_CASE_ASC,
        description=f"The cluster (its `{cluster_label()}` label, added by Prometheus); empty "
        "where series carry none.",
        current={"selected": False, "text": "", "value": ""},
        regex="",
    )


def exporter_variable() -> Variable:
    """The exporter's URL as seen from the browser, for the links to its overview page."""
    return Variable(
        name=EXPORTER_VAR,
        label="Exporter URL",
        type="textbox",
        query=EXPORTER_URL,
        default=EXPORTER_URL,
        description="Base URL of the zaroz exporter's overview page (`/`) as this browser "
        "reaches it, e.g. through `kubectl port-forward svc/zaroz-exporter 9817`.",
        current={"selected": False, "text": EXPORTER_URL, "value": EXPORTER_URL},
        regex="",
    )


# The three dashboards (uid, title), for links between them.
SIBLINGS = (("zaroz-units", "Units"), ("zaroz-generations", "Generations"),
            ("zaroz-exporter", "Exporter health"))


def workload_links() -> list[dict[str, Any]]:
    """Data links from a per-workload series: the workload on the overview page and in each of
    the three dashboards (same cluster, datasource and time range)."""
    wl = "${__field.labels.workload}"
    keep = (f"var-{DATASOURCE_VAR}=${{{DATASOURCE_VAR}}}&var-{CLUSTER_VAR}=${{{CLUSTER_VAR}}}"
            f"&var-{EXPORTER_VAR}=${{{EXPORTER_VAR}}}&${{__url_time_range}}")
    links = [{"title": f"Overview of {wl} (exporter page)",
              "url": f"${{{EXPORTER_VAR}}}/#wl-{wl}", "targetBlank": True}]
    links += [{"title": f"{title} dashboard: {wl}",
               "url": f"/d/{uid}?var-{WORKLOAD_VAR}={wl}&{keep}"} for uid, title in SIBLINGS]
    return links


def variables(workload_source: str) -> list[Variable]:
    """The variables every zaroz dashboard has, in the same order (links keep them)."""
    return [
        datasource_variable(
            DATASOURCE_VAR, "prometheus", "Prometheus", "Prometheus scraping the exporter."
        ),
        cluster_variable(),
        datasource_variable(
            TRACING_VAR,
            "tempo",
            "Traces",
            "Tempo holding the exporter's OTLP unit traces; exemplar trace links and the "
            "'Traces of this workload' panel links open here.",
        ),
        query_variable(
            WORKLOAD_VAR, "Workload", workload_source, "Workloads (All matches every workload)."
        ),
        query_variable(
            NAMESPACE_VAR,
            "Namespace",
            "zaroz_unitsignal_info",
            "Namespaces of UnitSignals; filters only the per-UnitSignal panels (event-log "
            "metrics carry no namespace).",
        ),
        exporter_variable(),
    ]


def trace_link(title: str = "Traces of ${__field.labels.workload}") -> dict[str, Any]:
    """A data link to Explore on the `$tracing` datasource, TraceQL on the unit spans' workload.

    Exemplars link to single traces through the Prometheus datasource's exemplar setting
    (`trace_id` label); this link is for browsing a workload's traces from any series.
    """
    panes = {
        "t": {
            "datasource": f"${{{TRACING_VAR}}}",
            "queries": [
                {
                    "refId": "A",
                    "datasource": {"type": "tempo", "uid": f"${{{TRACING_VAR}}}"},
                    "queryType": "traceql",
                    "query": '{span.zaroz.workload="${__field.labels.workload}"}',
                }
            ],
            "range": {"from": "${__from}", "to": "${__to}"},
        }
    }
    url = "/explore?schemaVersion=1&panes=" + json.dumps(panes, separators=(",", ":"))
    return {"title": title, "url": url, "targetBlank": True}


# --- layout and rendering --------------------------------------------------------------------

Section = tuple[str, Sequence[tuple[g.Panel, int]]]
PANEL_HEIGHT = 8


def layout(sections: Sequence[Section]) -> list[g.Panel]:
    """Rows of panels on Grafana's 24-column grid; a panel wraps when its row is full."""
    out: list[g.Panel] = []
    y = 0
    for title, panels in sections:
        out.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x = 0
        for panel, width in panels:
            if x + width > 24:
                x, y = 0, y + PANEL_HEIGHT
            out.append(attr.evolve(panel, gridPos=g.GridPos(h=PANEL_HEIGHT, w=width, x=x, y=y)))
            x += width
        y += PANEL_HEIGHT
    return out


def dashboard(
    title: str, uid: str, description: str, sections: Sequence[Section], workload_source: str
) -> g.Dashboard:
    """A zaroz dashboard: shared variables, links to its siblings, stable uid and panel ids."""
    own = uid  # siblings are the classic dashboards (only this one has a native variant)
    if is_native():
        title, uid = f"{title} (native histograms)", uid + NATIVE_SUFFIX
    return g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=TAGS,
        editable=False,
        refresh="30s",
        schemaVersion=SCHEMA_VERSION,
        timezone="browser",
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        time=g.Time("now-6h", "now"),
        templating=g.Templating(list=variables(workload_source)),
        links=[
            *(g.DashboardLink(title=t, type="link", uri=f"/d/{u}", includeVars=True,
                              keepTime=True, icon="dashboard")
              for u, t in SIBLINGS if u != own),
            g.DashboardLink(title="Exporter overview", type="link", keepTime=False,
                            uri=f"${{{EXPORTER_VAR}}}/", targetBlank=True,
                            icon="external link", tooltip="The exporter's own page"),
        ],
        panels=layout(sections),
    ).auto_panel_ids()


# The normalising step. Keys grafanalib writes that Grafana's current dashboard model
# (@grafana/schema, Dashboard) does not have: Angular-era fields (`span`, `height`, `minSpan`,
# `error`), the pre-schema-14 `rows`, `style`, `sharedCrosshair`, `hideControls`, export-only
# `__inputs`, template `useTags`/`tags*`/`auto*` (interval/tag variables only), the removed time
# picker `time_options`, and the old Table's top-level `color`/`columns`/`fontSize`/`mappings`
# (its field config carries them now). Row panels keep only what a row has.
_DROP: dict[str, frozenset[str]] = {
    "dashboard": frozenset(
        {"__inputs", "hideControls", "rows", "sharedCrosshair", "style"}
    ),
    "timepicker": frozenset({"time_options"}),
    "panel": frozenset(
        {"editable", "error", "height", "minSpan", "span", "color", "columns", "fontSize",
         "mappings"}
    ),
    "variable": frozenset({"useTags", "tagsQuery", "tagValuesQuery", "auto", "auto_min",
                           "auto_count"}),
}
_ROW_KEYS = frozenset({"collapsed", "datasource", "gridPos", "id", "panels", "repeat", "title",
                       "type"})


def _drop_nulls(value: Any) -> Any:
    """Drop `null`-valued keys: grafanalib writes null for unset fields, the schema forbids it.

    The one place Grafana's model has a meaningful null is a threshold step's `value` (the base
    step, -Infinity), so `steps` lists are left as they are.
    """
    if isinstance(value, dict):
        return {
            k: (v if k == "steps" else _drop_nulls(v)) for k, v in value.items() if v is not None
        }
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def normalise(data: dict[str, Any]) -> dict[str, Any]:
    """grafanalib's JSON -> Grafana's current model: drop nulls and the keys listed in `_DROP`."""
    data = _drop_nulls(data)
    for key in _DROP["dashboard"]:
        data.pop(key, None)
    for key in _DROP["timepicker"]:
        data.get("timepicker", {}).pop(key, None)
    panels = []
    for panel in data.get("panels", []):
        if panel.get("type") == "row":
            panel = {k: v for k, v in panel.items() if k in _ROW_KEYS}
        else:
            panel = {k: v for k, v in panel.items() if k not in _DROP["panel"]}
        panels.append(panel)
    data["panels"] = panels
    for var in data.get("templating", {}).get("list", []):
        for key in _DROP["variable"]:
            var.pop(key, None)
        var.get("current", {}).pop("tags", None)
    return data


def render(dash: g.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (what is checked in and imported)."""
    raw = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return normalise(raw)


def dumps(data: dict[str, Any]) -> str:
    """Stable text: sorted keys and a final newline, so diffs show only real changes."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
