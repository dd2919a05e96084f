"""The NetworkPolicy's egress names each peer the exporter talks to, and no more: DNS, the API
server, the events route of the shipped configuration, the OTLP collector. What an operator
must fill in is said where it applies, and deploy/README.md's patch narrows the base as it says."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from tests.test_deploy_build import _kubectl

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "base"
POLICY = BASE / "networkpolicy.yaml"


def _ports(rule: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p["protocol"], p["port"]) for p in rule["ports"]}


def _namespaces(rule: dict[str, Any]) -> set[str]:
    return {peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for peer in rule.get("to", []) if "namespaceSelector" in peer}


def _egress() -> list[dict[str, Any]]:
    return yaml.safe_load(POLICY.read_text())["spec"]["egress"]


def test_egress_is_one_rule_per_peer_each_with_its_ports() -> None:
    dns, api, route, otlp = _egress()  # exactly four rules, in this order (the README's patch)
    assert _ports(dns) == {("UDP", 53), ("TCP", 53)}
    assert _namespaces(dns) == {"kube-system"}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert "to" not in api and _ports(api) == {("TCP", 443), ("TCP", 6443)}
    assert _ports(otlp) == {("TCP", 4317), ("TCP", 4318)}
    assert _namespaces(otlp) == {"observability"}
    # The events route rule reaches where the shipped configuration points.
    config = yaml.safe_load((BASE / "configmap.yaml").read_text())["data"]
    url = urlsplit(config["ZAROZ_EXPORTER_EVENTS_URL"])
    host = url.hostname or ""
    namespace = host.split(".")[1] if host.endswith((".svc", ".svc.cluster.local")) else ""
    assert _namespaces(route) == {namespace}
    assert ("TCP", url.port or {"http": 80, "https": 443}[url.scheme]) in _ports(route)
    # No rule opens every port, and only the API server's has no destination.
    assert all(rule.get("ports") for rule in _egress())
    assert [i for i, rule in enumerate(_egress()) if not rule.get("to")] == [1]


def test_what_to_fill_in_is_said_at_each_rule_and_in_the_deploy_readme() -> None:
    text = POLICY.read_text()
    lines = text.split("  egress:\n", 1)[1].splitlines()
    rules = [i for i, line in enumerate(lines) if re.match(r"    - ", line)]
    assert len(rules) == 4
    assert all(lines[i - 1].startswith("    # ") for i in rules)  # each rule says what it is
    assert "FILL IN" in text.split("# The API server", 1)[1].split("- ports:", 1)[0]
    assert "FILL IN" in text.split("# The platform's events route", 1)[1].split("- to:", 1)[0]
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("## Network policy\n", 1)[1].split("\n## ", 1)[0]
    for peer in ("DNS", "API server", "events route", "OTLP collector"):
        assert f"| {peer} |" in section, peer
    assert "kubernetes.io/service-name=kubernetes" in section


def test_the_deploy_readme_patch_narrows_the_api_server_and_route_rules(tmp_path: Path) -> None:
    readme = (ROOT / "deploy" / "README.md").read_text()
    section = readme.split("## Network policy\n", 1)[1].split("\n## ", 1)[0]
    overlay = yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert overlay["resources"] == ["../../base"]
    overlay["resources"] = [os.path.relpath(BASE, tmp_path)]  # kustomize wants it relative
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    out = subprocess.run([_kubectl(), "kustomize", str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    policy = next(d for d in yaml.safe_load_all(out.stdout)
                  if d and d["kind"] == "NetworkPolicy")
    dns, api, route, otlp = policy["spec"]["egress"]
    assert [peer["ipBlock"]["cidr"] for peer in api["to"]] == ["203.0.113.10/32",
                                                             "203.0.113.11/32"]
    assert route["to"][0]["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "zaroz-events"}}
    assert route["to"][0]["namespaceSelector"] == _egress()[2]["to"][0]["namespaceSelector"]
    assert (dns, otlp) == (_egress()[0], _egress()[3])
