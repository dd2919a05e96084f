"""The Helm chart (deploy/helm/zaroz-exporter/) through the real Helm SDK, offline.

- PyPI's helm-python-sdk is Helm v4's Go SDK as a shared library: `helm_python.lint` and
  `Chart.load(...).render(values)` run the same code as `helm lint` and `helm template`, with
  the chart's values.schema.json enforced. No helm binary, no cluster, no network.
- Every value set under ci/ is linted and rendered; every rendered object is validated:
  built-in kinds with `kubernetes-validate --strict` (Kubernetes' own schemas, oldest and newest
  supported), ServiceMonitor, PodMonitor and PrometheusRule with the prometheus-operator CRD
  schemas as PyPI's cloudcoil-models-prometheus-operator ships them (pydantic models generated
  from the operator's CRDs; 0.80.x on Python 3.11, newer releases need 3.14): types, enums and
  patterns checked strictly, and a field the CRD does not know found by a round trip, since
  the API server would prune it. The kustomize builds' monitoring objects are checked too.
- Parity: the chart with default values renders the objects of `kubectl kustomize deploy/base`
  (less the Namespace) with the same container args, environment, image and pod settings, and
  the same rules and dashboards, so the two installs cannot drift.

A missing SDK or validator fails under CI (CI set) and skips elsewhere (tests/components.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy import chart as chartgen
from deploy import generate
from tests.components import missing

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "zaroz-exporter"
CI_VALUES = sorted(p.stem for p in (CHART / "ci").glob("*-values.yaml"))
RELEASE = NAMESPACE = "zaroz-exporter"
K8S_VERSIONS = ("1.28.0", "1.37.0")  # as tests/test_deploy_build.py: oldest and newest in use
OPERATOR_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
Doc = dict[str, Any]


def _helm() -> Any:
    try:
        import helm_python
    except ImportError:
        missing("helm-python-sdk (the test extra) is not installed: pip install -e '.[test]'")
    return helm_python


def ci_values(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / f"{name}.yaml").read_text(encoding="utf-8")) or {}


@cache
def _render_cached(values_json: str) -> tuple[tuple[str, tuple[Doc, ...]], ...]:
    helm = _helm()
    with helm.Chart.load(CHART) as chart:
        out = chart.render(json.loads(values_json), name=RELEASE, namespace=NAMESPACE)
    return tuple((path, tuple(d for d in yaml.safe_load_all(text) if d))
                 for path, text in sorted(out.items()) if not path.endswith("NOTES.txt"))


def render(values: dict[str, Any] | None = None) -> list[Doc]:
    """Every object the chart renders with these values (a fresh copy each call)."""
    files = _render_cached(json.dumps(values or {}, sort_keys=True))
    return copy.deepcopy([d for _, docs in files for d in docs])


def notes(values: dict[str, Any] | None = None) -> str:
    helm = _helm()
    with helm.Chart.load(CHART) as chart:
        out = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def _one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def _workload(docs: list[Doc]) -> Doc:
    (found,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    return found


def _container(docs: list[Doc]) -> Doc:
    (c,) = _workload(docs)["spec"]["template"]["spec"]["containers"]
    return c


def effective_env(docs: list[Doc]) -> dict[str, Any]:
    """The container's environment as the kubelet builds it: envFrom ConfigMaps, then env."""
    c = _container(docs)
    env: dict[str, Any] = {}
    for source in c.get("envFrom", []):
        env.update(_one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for e in c.get("env", []):
        env[e["name"]] = e.get("value", e.get("valueFrom"))
    return env


def _alerts(docs: list[Doc]) -> dict[str, Doc]:
    return {r["alert"]: r for d in docs if d["kind"] == "PrometheusRule"
            for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r}


def _groups(docs: list[Doc]) -> dict[str, list[Doc]]:
    return {d["metadata"]["name"]: d["spec"]["groups"]
            for d in docs if d["kind"] == "PrometheusRule"}


def _boards(docs: list[Doc], label: str = "grafana_dashboard") -> dict[str, str]:
    return {n: t for d in docs if d["kind"] == "ConfigMap" and label in d["metadata"].get(
        "labels", {}) for n, t in d["data"].items()}


# Lint, schema and metadata.

@pytest.mark.parametrize("values", CI_VALUES)
def test_chart_lints_clean_in_strict_mode(values: str) -> None:
    report = _helm().lint(CHART, ci_values(values), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["errors"] == [] and problems == [], (report["errors"], problems)
    assert report["total_charts_linted"] == 1


def test_lint_reports_a_broken_values_set() -> None:
    """The lint above can fail: a value of the wrong type is an error finding."""
    report = _helm().lint(CHART, {"replicas": "three"}, strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


def test_chart_metadata_and_app_version_is_the_project_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    with _helm().Chart.load(CHART) as chart:
        meta = chart.metadata
        assert chart.schema is not None
    assert meta["apiVersion"] == "v2" and meta["name"] == "zaroz-exporter"
    assert meta["appVersion"] == project["version"]
    image = _container(render())["image"]
    assert image == f"ghcr.io/zaroz/zaroz-exporter:{project['version']}"


WRONG_VALUES = [
    ("replicas as a string", {"replicas": "three"}, "/replicas"),
    ("replicas zero", {"replicas": 0}, "/replicas"),
    ("switch as a string", {"serviceMonitor": {"enabled": "yes"}}, "/serviceMonitor/enabled"),
    ("unknown top-level value", {"replica": 3}, "replica"),
    ("unknown nested value", {"autosharding": {"enable": True}}, "enable"),
    ("histogram mode", {"histograms": "hybrid"}, "/histograms"),
    ("digest format", {"image": {"digest": "latest"}}, "/image/digest"),
    ("interval format", {"serviceMonitor": {"interval": "30 seconds"}},
     "/serviceMonitor/interval"),
    ("group switch type", {"prometheusRule": {"groups": {"zaroz-slo": "off"}}},
     "/prometheusRule/groups/zaroz-slo"),
    ("allowlist as a string", {"metrics": {"allowlist": "zaroz_.*"}}, "/metrics/allowlist"),
    ("port out of range", {"service": {"port": 70000}}, "/service/port"),
    ("runbook base with an anchor", {"prometheusRule": {"runbookUrl": "https://x/#a"}},
     "/prometheusRule/runbookUrl"),
]


@pytest.mark.parametrize(("name", "values", "where"), WRONG_VALUES,
                         ids=[w[0] for w in WRONG_VALUES])
def test_values_schema_refuses_a_wrong_value(name: str, values: dict[str, Any],
                                             where: str) -> None:
    helm = _helm()
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError) as e:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert where in str(e.value), str(e.value)


CONTRADICTIONS = [
    ({"replicas": 2}, "autosharding.enabled"),
    ({"metrics": {"allowlist": ["a"], "denylist": ["b"]}}, "exclusive"),
    ({"podMonitor": {"enabled": True}}, "twice"),
    ({"webhook": {"ingress": {"enabled": True}}}, "webhook.ingress.hosts"),
    ({"webhook": {"enabled": False, "ingress": {"enabled": True, "hosts": ["h"]}}},
     "needs webhook.enabled"),
    ({"webConfig": {"clientCA": {"enabled": True}}}, "needs webConfig.tls.enabled"),
    ({"autosharding": {"enabled": True}, "replicas": 2,
      "persistence": {"enabled": True, "existingClaim": "c"}}, "existingClaim"),
]


@pytest.mark.parametrize(("values", "says"), CONTRADICTIONS,
                         ids=[c[1] for c in CONTRADICTIONS])
def test_contradictory_values_fail_with_one_line_naming_them(values: dict[str, Any],
                                                             says: str) -> None:
    helm = _helm()
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError) as e:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert says in str(e.value)


def test_values_schema_describes_and_accepts_the_defaults_and_every_ci_set() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    for name, values in [("values.yaml", defaults)] + [(n, ci_values(n)) for n in CI_VALUES]:
        errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(values)]
        assert errors == [], (name, errors)
    # Every default is a row of README's table, described (the generator refuses otherwise).
    rows = [path for path, _, _ in chartgen._leaves(defaults, schema)]
    assert "autosharding.enabled" in rows and "prometheusRule.runbookUrl" in rows
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert all(f"| `{row}` |" in readme for row in rows)


def test_every_rule_group_has_a_switch() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    switches = defaults["prometheusRule"]["groups"]
    assert sorted(switches) == sorted(chartgen.rule_groups())
    assert all(v is True for v in switches.values())


# Every rendered object against the schemas it will meet in a cluster.

@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("values", CI_VALUES)
def test_builtin_kinds_validate_strict(values: str, version: str) -> None:
    try:
        from kubernetes_validate import ValidationError, validate
    except ImportError:
        missing("kubernetes-validate (the test extra) is not installed")
    docs = [d for d in render(ci_values(values)) if d["kind"] not in OPERATOR_KINDS]
    assert docs
    problems = []
    for doc in docs:
        try:
            validate(doc, version, strict=True)
        except ValidationError as e:
            problems.append(f"{_key(doc)}: {e.message} at {'.'.join(map(str, e.path))}")
    assert problems == [], f"{values} on Kubernetes {version}"


def _unknown_fields(sent: Any, kept: Any, where: str = "") -> list[str]:
    """Paths of `sent` that the model did not keep (fields the CRD does not know)."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [where or "$"]
        return [p for k, v in sent.items()
                for p in ([f"{where}.{k}"] if k not in kept
                          else _unknown_fields(v, kept[k], f"{where}.{k}"))]
    if isinstance(sent, list) and isinstance(kept, list):
        return [p for i, (a, b) in enumerate(zip(sent, kept, strict=False))
                for p in _unknown_fields(a, b, f"{where}[{i}]")]
    return [] if sent == kept else [f"{where} ({sent!r} kept as {kept!r})"]


def operator_problems(doc: Doc) -> list[str]:
    """What the prometheus-operator CRD schema refuses or would prune in `doc`."""
    try:
        import pydantic
        from cloudcoil.models.prometheus_operator import v1
    except ImportError:
        missing("cloudcoil-models-prometheus-operator (the test extra) is not installed")
    model = getattr(v1, doc["kind"])
    try:
        parsed = model.model_validate(doc, strict=True)
    except pydantic.ValidationError as e:
        return [f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors()]
    kept = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return [f"unknown field {p}" for p in _unknown_fields(doc, kept)]


@pytest.mark.parametrize("values", CI_VALUES)
def test_monitoring_kinds_validate_against_the_operator_crds(values: str) -> None:
    docs = [d for d in render(ci_values(values)) if d["kind"] in OPERATOR_KINDS]
    assert {d["kind"] for d in docs} >= {"PrometheusRule"}
    for doc in docs:
        assert operator_problems(doc) == [], f"{doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize("overlay", ["base", "tls", "native-histograms"])
def test_kustomize_monitoring_kinds_validate_against_the_operator_crds(overlay: str) -> None:
    """The same check for what `kubectl kustomize` builds (tests/test_deploy_build.py checks
    those objects' shape by hand), so both installs meet the real CRDs."""
    docs = [d for d in _kustomize(overlay) if d["kind"] in OPERATOR_KINDS]
    assert {d["kind"] for d in docs} == {"ServiceMonitor", "PrometheusRule"}
    for doc in docs:
        assert operator_problems(doc) == [], f"{overlay} {doc['kind']}/{doc['metadata']['name']}"


@pytest.mark.parametrize(("change", "found"), [
    (lambda e: e.update(scheme="ftp"), "scheme"),
    (lambda e: e.update(interval="30 seconds"), "interval"),
    (lambda e: e.update(honorLabels="true"), "honorLabels"),
    (lambda e: e.update(scrapeTimout="10s"), "unknown field .spec.endpoints[0].scrapeTimout"),
    (lambda e: e["tlsConfig"].update(insecure=True), "tlsConfig.insecure"),
], ids=["enum", "pattern", "type", "unknown field", "unknown nested field"])
def test_operator_schema_check_refuses_what_the_crd_refuses(change: Any, found: str) -> None:
    """The check above can fail: the real CRD's enums, patterns, types and field names."""
    monitor = _one(render(ci_values("tls-webhook-ingress-values")), "ServiceMonitor")
    assert operator_problems(monitor) == []
    change(monitor["spec"]["endpoints"][0])
    problems = operator_problems(monitor)
    assert problems and any(found in p for p in problems), problems


# Parity with the kustomize base and overlays.

def _kustomize(overlay: str) -> list[Doc]:
    from tests.test_deploy_build import build

    return build(overlay)


def _key(d: Doc) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


POD_KEYS = ("securityContext", "serviceAccountName", "automountServiceAccountToken",
            "terminationGracePeriodSeconds")
CONTAINER_KEYS = ("image", "args", "ports", "securityContext", "resources", "livenessProbe",
                  "readinessProbe", "imagePullPolicy")


@pytest.mark.parametrize(("overlay", "values"), [
    ("base", "defaults-values"),
    ("sharded", {"autosharding": {"enabled": True}, "replicas": generate.SHARDS}),
    ("persistent-state", {"autosharding": {"enabled": True}, "replicas": generate.SHARDS,
                          "persistence": {"enabled": True}}),
    ("native-histograms", "native-histograms-values"),
], ids=["base", "sharded", "persistent-state", "native-histograms"])
def test_chart_renders_what_kustomize_builds(overlay: str, values: str | dict[str, Any]) -> None:
    """Same objects (kind and name; Helm creates no Namespace), same container args and
    environment (envFrom resolved), same pod and container settings, same rules and
    dashboards: the two installs cannot drift."""
    kust = _kustomize(overlay)
    helm = render(ci_values(values) if isinstance(values, str) else values)
    assert {_key(d) for d in helm} == {_key(d) for d in kust if d["kind"] != "Namespace"}
    assert effective_env(helm) == effective_env(kust)
    hc, kc = _container(helm), _container(kust)
    for key in CONTAINER_KEYS:
        assert hc.get(key) == kc.get(key), key
    assert {m["mountPath"] for m in hc["volumeMounts"]} == {
        m["mountPath"] for m in kc["volumeMounts"]}
    hw, kw = _workload(helm), _workload(kust)
    for key in POD_KEYS:
        assert hw["spec"]["template"]["spec"].get(key) == kw["spec"]["template"]["spec"].get(
            key), key
    assert hw["spec"]["replicas"] == kw["spec"]["replicas"]
    assert hw["spec"].get("volumeClaimTemplates") == kw["spec"].get("volumeClaimTemplates")
    assert _groups(helm) == _groups(kust)
    assert _boards(helm) == _boards(kust)
    hp, kp = _one(helm, "NetworkPolicy")["spec"], _one(kust, "NetworkPolicy")["spec"]
    assert hp["ingress"] == kp["ingress"] and hp["egress"] == kp["egress"]
    (he,), (ke,) = (_one(d, "ServiceMonitor")["spec"]["endpoints"] for d in (helm, kust))
    assert he == ke


def test_parity_notices_a_difference() -> None:
    """The parity above can fail: a changed default shows in the effective environment."""
    kust = _kustomize("base")
    assert effective_env(render({"logLevel": "debug"})) != effective_env(kust)
    assert _container(render({"extraArgs": ["--wait=5"]}))["args"] != _container(kust)["args"]


# What each value set must give.

@pytest.mark.parametrize("replicas", [2, 3, 7])
def test_sharded_statefulset_replicas_equal_total_shards(replicas: int) -> None:
    from exporter.model.sharding import ordinal_from_pod_name

    values = ci_values("sharded-persistent-values") | {"replicas": replicas}
    docs = render(values)
    assert [d for d in docs if d["kind"] == "Deployment"] == []
    sts = _one(docs, "StatefulSet")
    env = {e["name"]: e for e in _container(docs)["env"]}
    assert sts["spec"]["replicas"] == int(env["ZAROZ_EXPORTER_TOTAL_SHARDS"]["value"]) == replicas
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert "ZAROZ_EXPORTER_SHARD" not in env  # the ordinal is the pod's, not the template's
    name = sts["metadata"]["name"]
    assert [ordinal_from_pod_name(f"{name}-{i}") for i in range(replicas)] == list(
        range(replicas))
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    headless = _one(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["metadata"]["labels"].get("zaroz.cloud/metrics") is None  # scraped once
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    state = env["ZAROZ_EXPORTER_STATE_DIR"]["value"]
    mount = next(m for m in _container(docs)["volumeMounts"] if m["mountPath"] == state)
    assert claim["metadata"]["name"] == mount["name"]
    assert mount["name"] not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["volumeMode"] == "Filesystem"  # persistence.volumeClaimTemplate
    assert claim["metadata"]["labels"] == {"backup": "false"}
    assert [d for d in docs if d["kind"] == "PersistentVolumeClaim"] == []


def test_persistence_without_sharding_is_one_claim() -> None:
    docs = render({"persistence": {"enabled": True, "size": "5Gi"}})
    claim = _one(docs, "PersistentVolumeClaim")
    pod = _workload(docs)["spec"]["template"]["spec"]
    (state,) = [v for v in pod["volumes"] if v["name"] == "state"]
    assert state == {"name": "state", "persistentVolumeClaim": {
        "claimName": claim["metadata"]["name"]}}
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert _workload(docs)["spec"]["strategy"] == {"type": "Recreate"}  # RWO: never two pods
    docs = render({"persistence": {"enabled": True, "existingClaim": "mine"}})
    assert [d for d in docs if d["kind"] == "PersistentVolumeClaim"] == []
    (state,) = [v for v in _workload(docs)["spec"]["template"]["spec"]["volumes"]
                if v["name"] == "state"]
    assert state["persistentVolumeClaim"]["claimName"] == "mine"


@pytest.mark.parametrize("values", CI_VALUES)
def test_pod_is_locked_down_and_probed(values: str) -> None:
    docs = render(ci_values(values))
    pod = _workload(docs)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = _container(docs)
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    https = ci_values(values).get("webConfig", {}).get("tls", {}).get("enabled", False)
    scheme = {"scheme": "HTTPS"} if https else {}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", **scheme}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", **scheme}
    assert [d for d in docs if d["kind"] == "Secret"
            and d["metadata"]["name"] != f"{RELEASE}-web-config"] == [], "no secret values"


@pytest.mark.parametrize("values", CI_VALUES)
def test_env_vars_are_serve_flags_and_namespaced(values: str) -> None:
    from tests.test_deploy import _cli_env_vars

    docs = render(ci_values(values))
    ours = {k for k in effective_env(docs) if k.startswith("ZAROZ_EXPORTER_")}
    assert ours - _cli_env_vars() == set()
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    dashboards_ns = ci_values(values).get("dashboards", {}).get("namespace") or NAMESPACE
    for d in docs:
        if d["kind"] in cluster_scoped:
            assert "namespace" not in d["metadata"]
        elif d["metadata"]["name"].startswith(f"{RELEASE}-dashboard-"):
            assert d["metadata"]["namespace"] == dashboards_ns
        else:
            assert d["metadata"]["namespace"] == NAMESPACE, _key(d)


def test_every_setting_reaches_the_exporter() -> None:
    """The everything-on set: each value lands in the variable or flag the exporter reads."""
    values = ci_values("everything-values")
    docs = render(values)
    env = effective_env(docs)
    assert env["ZAROZ_EXPORTER_EVENTS_URL"] == "https://events.zaroz-system.svc:8443"
    assert env["ZAROZ_EXPORTER_WORKLOAD"] == "wl-a,wl-b"
    assert env["ZAROZ_EXPORTER_METRIC_DENYLIST"] == "zaroz_unitsignal_status_.*"
    assert "ZAROZ_EXPORTER_METRIC_ALLOWLIST" not in env
    assert env["ZAROZ_EXPORTER_METRIC_OPT_IN_LIST"] == "zaroz_unitsignal_status_seq"
    assert env["ZAROZ_EXPORTER_UNITSIGNAL_LABELS_ALLOWLIST"] == "zone,team"
    assert env["ZAROZ_EXPORTER_NAMESPACE"] == "wl-a,wl-b"
    assert env["ZAROZ_EXPORTER_LABEL_SELECTOR"] == "tier=game"
    assert env["ZAROZ_EXPORTER_LOG_LEVEL"] == "debug"
    assert env["ZAROZ_EXPORTER_GZIP_LEVEL"] == "6"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability.svc:4318"
    assert env["ZAROZ_EXPORTER_CHECKPOINT_INTERVAL"] == "15"
    assert env["ZAROZ_EXPORTER_TOTAL_SHARDS"] == "4"
    assert env["ZAROZ_EXPORTER_WEBHOOK_WEB_CONFIG_FILE"] == "/etc/zaroz/webhook-web/web-config.yml"
    c = _container(docs)
    assert c["args"] == ["serve", "--unit-idle-timeout=3600"]
    assert c["image"] == ("registry.example.com/zaroz/zaroz-exporter:0.1.0@"
                          + values["image"]["digest"])
    pod = _workload(docs)["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["serviceAccountName"] == "zaroz-sa"
    assert pod["priorityClassName"] == "system-cluster-critical"
    for key in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints"):
        assert pod[key] == values[key], key
    meta = _workload(docs)["spec"]["template"]["metadata"]
    assert meta["labels"]["tier"] == "monitoring"
    assert meta["annotations"]["example.com/scrape"] == "false"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["events-token"]["secret"] == {"secretName": "route-token",
                                                 "items": [{"key": "bearer", "path": "token"}]}
    assert volumes["webhook-secret"]["secret"]["secretName"] == "webhook-signing"
    assert volumes["extra-ca"] == values["extraVolumes"][0]
    assert values["extraVolumeMounts"][0] in c["volumeMounts"]
    assert all(d["metadata"]["labels"]["team"] == "platform" for d in docs)
    hook = _one(docs, "Service", f"{RELEASE}-webhook")
    assert hook["spec"]["type"] == "LoadBalancer" and hook["spec"]["ports"][0]["port"] == 8080
    egress = _one(docs, "NetworkPolicy")["spec"]["egress"]
    assert {"ipBlock": {"cidr": "10.0.0.1/32"}} in [t for r in egress for t in r.get("to", [])]
    assert values["networkPolicy"]["extraEgress"][0] in egress
    monitor = _one(docs, "PodMonitor")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http" and endpoint["interval"] == "15s"
    assert endpoint["honorLabels"] is True and endpoint["scheme"] == "https"
    assert endpoint["basicAuth"]["password"] == {"name": "scrape-auth", "key": "password"}
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    assert [d for d in docs if d["kind"] == "ServiceMonitor"] == []


def test_the_exporter_reads_the_rendered_settings_as_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered environment and args through the exporter's own parser (as the container
    would start it): lists split, numbers typed, every value where the flag expects it."""
    from exporter import cli

    docs = render(ci_values("everything-values"))
    for name in [n for n in os.environ if n.startswith(cli.ENV_PREFIX)]:
        monkeypatch.delenv(name)
    for name, value in effective_env(docs).items():
        if isinstance(value, str):
            monkeypatch.setenv(name, value)
    args = cli.build_parser().parse_args(_container(docs)["args"])
    assert args.command == "serve"
    assert args.events_url == "https://events.zaroz-system.svc:8443"
    assert args.events_token_file == "/var/run/zaroz/events/token"
    assert args.workload == ["wl-a", "wl-b"] and args.namespace == ["wl-a", "wl-b"]
    assert args.metric_denylist == ["zaroz_unitsignal_status_.*"] and args.metric_allowlist == []
    assert args.metric_opt_in_list == ["zaroz_unitsignal_status_seq"]
    assert args.unitsignal_labels_allowlist == ["zone", "team"]
    assert args.label_selector == "tier=game" and args.kube == "on"
    assert (args.total_shards, args.gzip_level, args.log_level) == (4, 6, "debug")
    assert (args.unit_idle_timeout, args.checkpoint_interval) == (3600.0, 15.0)
    assert args.listen == "0.0.0.0:9817" and args.webhook_listen == "0.0.0.0:9818"
    assert args.web_config_file == "/etc/zaroz/web/web-config.yml"
    assert args.webhook_secret_file == ["/var/run/zaroz/webhook/secret"]
    assert args.state_dir == "/var/lib/zaroz-exporter"


def test_rbac_is_read_only_on_unitsignals_plus_extra_rules() -> None:
    unitsignals = {"apiGroups": ["units.zaroz.cloud"], "resources": ["unitsignals"],
                   "verbs": ["get", "list", "watch"]}
    for values in CI_VALUES:
        docs = render(ci_values(values))
        assert [d for d in docs if d["kind"] in ("Role", "RoleBinding")] == []
        role = _one(docs, "ClusterRole")
        extra = ci_values(values).get("rbac", {}).get("extraRules", [])
        assert role["rules"] == [unitsignals, *extra], values
        binding = _one(docs, "ClusterRoleBinding")
        account = _one(docs, "ServiceAccount")
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "namespace": NAMESPACE,
                                        "name": account["metadata"]["name"]}]
        assert _workload(docs)["spec"]["template"]["spec"]["serviceAccountName"] == account[
            "metadata"]["name"]
    docs = render({"rbac": {"create": False}, "serviceAccount": {"create": False,
                                                                 "name": "theirs"}})
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding",
                                                 "ServiceAccount")]
    assert _workload(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "theirs"


def test_tls_values_serve_metrics_over_https_with_a_web_config_the_exporter_accepts(
        tmp_path: Path) -> None:
    from exporter.web.config import parse
    from tests.certs import CA

    docs = render(ci_values("tls-webhook-ingress-values"))
    c = _container(docs)
    pod = _workload(docs)["spec"]["template"]["spec"]
    env = effective_env(docs)
    path = Path(env["ZAROZ_EXPORTER_WEB_CONFIG_FILE"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    secret = _one(docs, "Secret", volumes[mounts[str(path.parent)]]["secret"]["secretName"])
    text = secret["stringData"][path.name]
    assert volumes[mounts["/etc/zaroz/tls"]]["secret"]["secretName"] == "zaroz-exporter-tls"
    assert volumes[mounts["/etc/zaroz/client-ca"]]["secret"]["secretName"] == (
        "zaroz-exporter-client-ca")
    ca = CA.make("ca")
    ca.issue("server", tmp_path / "tls.crt", tmp_path / "tls.key")
    ca.write(tmp_path / "ca.crt")
    local = text.replace("/etc/zaroz/tls", str(tmp_path)).replace(
        "/etc/zaroz/client-ca", str(tmp_path))
    cfg = parse(local, tmp_path / path.name)
    assert cfg.tls is not None and cfg.tls.cert_file == tmp_path / "tls.crt"
    assert yaml.safe_load(text)["tls_server_config"]["client_auth_type"] == (
        "RequireAndVerifyClientCert")
    assert cfg.users and "prometheus" in cfg.users
    (endpoint,) = _one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["keySecret"] == {"name": "prometheus-client-cert",
                                                  "key": "tls.key"}
    assert endpoint["basicAuth"]["username"] == {"name": "zaroz-exporter-scrape-auth",
                                                 "key": "username"}
    # Without a tlsConfig of its own, the monitor trusts the TLS Secret's CA.
    (endpoint,) = _one(render({"webConfig": {"tls": {"enabled": True}}}),
                       "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == {"serverName": f"{RELEASE}.{NAMESPACE}.svc",
                                     "ca": {"secret": {"name": f"{RELEASE}-tls",
                                                       "key": "ca.crt"}}}
    assert "https://" in notes({"webConfig": {"tls": {"enabled": True}}})
    # An operator's own web config: mounted as is, https only when it says it serves TLS.
    for tls in (False, True):
        docs = render({"webConfig": {"existingSecret": "mine", "tls": {"enabled": tls}}})
        volumes = {v["name"]: v for v in _workload(docs)["spec"]["template"]["spec"]["volumes"]}
        assert volumes["web-config"]["secret"] == {"secretName": "mine"} and "tls" not in volumes
        assert [d for d in docs if d["kind"] == "Secret"] == []
        probe = _container(docs)["readinessProbe"]["httpGet"]
        assert probe.get("scheme", "HTTP") == ("HTTPS" if tls else "HTTP")
        (endpoint,) = _one(docs, "ServiceMonitor")["spec"]["endpoints"]
        assert endpoint["scheme"] == ("https" if tls else "http")


def test_webhook_ingress_exposes_only_the_webhook() -> None:
    docs = render(ci_values("tls-webhook-ingress-values"))
    ingress = _one(docs, "Ingress")["spec"]
    hook = f"{RELEASE}-webhook"
    assert ingress["rules"] == [{"host": "zaroz-webhooks.example.com", "http": {"paths": [{
        "path": "/v1/webhooks/events", "pathType": "Exact",
        "backend": {"service": {"name": hook, "port": {"name": "webhook"}}}}]}}]
    assert _one(docs, "Service", hook)["spec"]["ports"] == [
        {"name": "webhook", "port": 80, "targetPort": "webhook", "protocol": "TCP"}]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"secretName": "zaroz-exporter-webhook-tls",
                                       "hosts": ["zaroz-webhooks.example.com"]}]
    monitor = _one(docs, "ServiceMonitor")
    selected = [d["metadata"]["name"] for d in docs if d["kind"] == "Service" and monitor[
        "spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()]
    assert selected == [RELEASE], "only the metrics Service is scraped"
    # No webhook: no listener, Service, secret or policy port for it.
    docs = render({"webhook": {"enabled": False}})
    env = effective_env(docs)
    assert "ZAROZ_EXPORTER_WEBHOOK_LISTEN" not in env
    assert "ZAROZ_EXPORTER_WEBHOOK_SECRET_FILE" not in env
    assert [d for d in docs if d["kind"] == "Service"] == [_one(docs, "Service", RELEASE)]
    ports = {p["port"] for r in _one(docs, "NetworkPolicy")["spec"]["ingress"]
             for p in r["ports"]}
    assert ports == {9817}


def _rule_files(mode: str) -> dict[str, list[Doc]]:
    source = generate.ALERT_RULES / ("native" if mode == "native" else "")
    return {f"{RELEASE}-{p.stem}": yaml.safe_load(p.read_text(encoding="utf-8"))["groups"]
            for p in sorted(source.glob("*.yaml"))}


@pytest.mark.parametrize("mode", ["classic", "native"])
def test_rules_are_the_generated_ones(mode: str) -> None:
    docs = render({"histograms": mode})
    assert _groups(docs) == _rule_files(mode)
    exprs = [r["expr"] for gs in _groups(docs).values() for g in gs for r in g["rules"]]
    native = any("histogram_fraction(" in e for e in exprs)
    classic = any(re.search(r"_seconds_bucket\b", e) for e in exprs)
    assert (native, classic) == ((True, False) if mode == "native" else (False, True))


def test_rule_switches_runbook_base_and_additional_labels() -> None:
    values = ci_values("everything-values")
    p = values["prometheusRule"]
    docs = render(values)
    generated = _rule_files(values["histograms"])
    got = _groups(docs)
    off = {g for g, on in p["groups"].items() if not on}
    assert off and set(got) == set(generated)
    for name, groups in generated.items():
        assert [g["name"] for g in got[name]] == [g["name"] for g in groups
                                                  if g["name"] not in off]
        wanted = {g["name"]: g for g in groups}
        for group in got[name]:
            for rule, source in zip(group["rules"], wanted[group["name"]]["rules"], strict=True):
                if "record" in rule:
                    assert rule == source  # recorded series keep their labels
                    continue
                # Added labels, the rule's own winning (severity is kept); the runbook base
                # replaced, the anchor kept; nothing else changed.
                expected = copy.deepcopy(source)
                expected["labels"] = {"team": "platform", **source["labels"]}
                anchor = source["annotations"]["runbook_url"].split("#", 1)[1]
                expected["annotations"]["runbook_url"] = f"{p['runbookUrl']}#{anchor}"
                assert rule == expected
    rule = _one(docs, "PrometheusRule", f"{RELEASE}-alerts")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["annotations"] == {"owner": "platform"}
    # Every group of a file switched off: no empty PrometheusRule.
    recording = [g["name"] for g in generated[f"{RELEASE}-recording"]]
    docs = render({"prometheusRule": {"groups": dict.fromkeys(recording, False)}})
    assert set(_groups(docs)) == {f"{RELEASE}-alerts"}
    assert [d for d in render({"prometheusRule": {"enabled": False}})
            if d["kind"] == "PrometheusRule"] == []


@pytest.mark.parametrize("mode", ["classic", "native"])
def test_dashboards_are_the_generated_ones_labelled_for_the_sidecar(mode: str) -> None:
    sources = {p.name: p.read_text(encoding="utf-8") for p in generate.DASHBOARDS.glob("*.json")}
    if mode == "native":
        for p in (generate.DASHBOARDS / "native").glob("*.json"):
            sources.pop(p.stem.removesuffix(generate.NATIVE_SUFFIX) + ".json")
            sources[p.name] = p.read_text(encoding="utf-8")
    assert _boards(render({"histograms": mode})) == sources  # byte for byte
    values = {"histograms": mode, "dashboards": ci_values("everything-values")["dashboards"]}
    docs = render(values)
    assert _boards(docs, "grafana_dashboard_zaroz") == sources
    for d in docs:
        if d["metadata"]["name"].startswith(f"{RELEASE}-dashboard-"):
            assert d["metadata"]["labels"]["grafana_dashboard_zaroz"] == "yes"
            assert "grafana_dashboard" not in d["metadata"]["labels"]
            assert d["metadata"]["annotations"] == {"grafana_folder": "Zaroz",
                                                    "owner": "platform"}
            assert d["metadata"]["namespace"] == "monitoring"
    assert _boards(render({"dashboards": {"enabled": False}})) == {}


def test_crd_install_renders_the_generated_crd_and_keeps_it() -> None:
    assert [d for d in render() if d["kind"] == "CustomResourceDefinition"] == []
    crd = _one(render({"crds": {"install": True}}), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    want = generate.crd()
    assert crd["spec"] == want["spec"] and crd["metadata"]["name"] == want["metadata"]["name"]


def test_every_rendered_object_fits_a_client_side_apply() -> None:
    """As tests/test_deploy.py for the kustomize files: no object near the 256 KiB of
    annotations a client-side apply needs (Helm itself applies server-side or by patch)."""
    for values in CI_VALUES:
        sizes = {_key(d): len(json.dumps(d)) for d in render(ci_values(values))}
        assert max(sizes.values()) < 128 * 1024, (values, max(sizes, key=sizes.__getitem__))


def test_the_packaged_chart_renders_the_same_and_fits_a_release(tmp_path: Path) -> None:
    """`helm package` keeps files/ (the generated rules and dashboards), and the archive, which
    Helm stores in every release's Secret (1 MiB at most), stays small."""
    helm = _helm()
    archive = Path(helm.package(CHART, destination=tmp_path))
    assert archive.stat().st_size < 256 * 1024
    with helm.Chart.load_archive(archive.read_bytes()) as packaged:
        out = packaged.render({"histograms": "native"}, name=RELEASE, namespace=NAMESPACE)
    docs = [d for path, text in sorted(out.items()) if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text) if d]
    assert docs == render({"histograms": "native"})


def test_notes_tell_the_next_steps() -> None:
    text = notes(ci_values("sharded-persistent-values"))
    assert f"create secret generic {RELEASE}-events --from-file=token=" in text
    assert f"statefulset/{RELEASE}" in text and "3 shards" in text
    assert "scrape_native_histograms" in notes({"histograms": "native"})
    assert "no ServiceMonitor or PodMonitor" in notes({"serviceMonitor": {"enabled": False}})
