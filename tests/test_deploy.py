"""deploy/ and the Dockerfile, checked without a cluster or a Docker engine.

Why static checks: operators install these manifests into clusters the project never sees, and
a wrong RBAC verb, a missing securityContext field or a stale CRD would only show up there. These
tests read the hand-written files and the generator (deploy/generate.py); test_deploy_build.py
builds the overlays with kustomize and validates the result.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
import yaml

from deploy import generate, write
from exporter import cli

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "deploy" / "base"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _cli_env_vars() -> set[str]:
    """Every ZAROZ_EXPORTER_* variable `serve` reads, taken from its flags' help texts."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    serve = sub.choices["serve"]
    return {m for a in serve._actions for m in re.findall(r"\[env (\w+)\]", a.help or "")}


def test_generated_manifests_are_current() -> None:
    stale = [str(p.relative_to(ROOT)) for p in write.stale()]
    assert not stale, f"stale generated manifests {stale}: run `python -m deploy`"


def test_manifest_env_vars_are_serve_flags() -> None:
    """A misspelled variable is silently ignored by the exporter: catch it here instead."""
    deployment = _yaml(BASE / "deployment.yaml")
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    env |= set(_yaml(BASE / "configmap.yaml")["data"])
    sharded = generate.statefulset()
    env |= {e["name"] for e in sharded["spec"]["template"]["spec"]["containers"][0]["env"]}
    ours = {e for e in env if e.startswith(cli.ENV_PREFIX)}
    unknown = ours - _cli_env_vars()
    assert not unknown, f"not flags of `zaroz-exporter serve`: {sorted(unknown)}"


def test_listen_port_matches_the_cli_default() -> None:
    deployment = _yaml(BASE / "deployment.yaml")
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert ports[0] == {"name": "http", "containerPort": cli.DEFAULT_PORT, "protocol": "TCP"}
    assert ports[1] == {"name": "webhook", "containerPort": cli.DEFAULT_PORT + 1,
                        "protocol": "TCP"}


def test_image_tag_is_the_project_version() -> None:
    """The kustomization pins the image to the release it was written for, never `latest`."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    images = _yaml(BASE / "kustomization.yaml")["images"]
    assert [(i["name"], i["newTag"]) for i in images] == [("zaroz-exporter", version)]


def test_statefulset_shard_count_is_written_once() -> None:
    sts = generate.statefulset(5)
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert sts["spec"]["replicas"] == 5
    assert env["ZAROZ_EXPORTER_TOTAL_SHARDS"]["value"] == "5"
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert "ZAROZ_EXPORTER_SHARD" not in env  # the ordinal comes from the pod name


def test_to_structural_refuses_what_it_cannot_express() -> None:
    """A contract keyword without a CRD equivalent must stop generation, not weaken the CRD."""
    with pytest.raises(generate.UnsupportedSchema):
        generate.to_structural({"$ref": "#/$defs/x"})
    with pytest.raises(generate.UnsupportedSchema):
        generate.to_structural({"type": ["string", "null"]})
    with pytest.raises(generate.UnsupportedSchema):
        generate.to_structural({"oneOf": [{"type": "object"}, {"type": "array"}]})


def test_to_structural_conversions() -> None:
    conv = generate.to_structural
    assert conv({"const": 1}) == {"type": "integer", "enum": [1]}
    assert conv({"oneOf": [{"type": "null"}, {"type": "string"}]}) == {
        "type": "string", "nullable": True}
    assert conv({"oneOf": [{"type": "null"}, {"enum": ["a", "b"]}]}) == {
        "type": "string", "enum": ["a", "b", None], "nullable": True}
    assert conv({"description": "any"}) == {
        "description": "any", "x-kubernetes-preserve-unknown-fields": True, "nullable": True}
    assert conv({"type": "object", "properties": {}, "additionalProperties": False}) == {
        "type": "object", "properties": {}}
    assert conv({"$schema": "x", "$id": "y", "title": "t", "type": "boolean"}) == {
        "type": "boolean"}


def test_dashboards_and_rules_are_generated_from_their_sources() -> None:
    boards = generate.dashboard_configmaps()
    assert len(boards) == len(list(generate.DASHBOARDS.glob("*.json")))
    for cm in boards:
        assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
        (name, text), = cm["data"].items()
        assert text == (generate.DASHBOARDS / name).read_text(encoding="utf-8")
        # A ConfigMap holds at most 1 MiB.
        assert len(text.encode()) < 1024 * 1024 - 4096, name
    rules = generate.prometheus_rules()
    assert len(rules) == len(list(generate.ALERT_RULES.glob("*.yaml")))


def test_generated_names_are_dns_labels() -> None:
    assert generate._dns_name("Zaroz_Units.v2") == "zaroz-units-v2"
    with pytest.raises(ValueError):
        generate._dns_name("__")


# Dockerfile: there is no Docker engine here, so it is linted as text.

def _dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_base_images_are_pinned_slim_python_311() -> None:
    bases = [rest.split()[0] for word, rest in _dockerfile() if word == "FROM"]
    assert bases, "no FROM"
    for image in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", image), image


def test_dockerfile_runs_as_numeric_non_root_user() -> None:
    users = [rest for word, rest in _dockerfile() if word == "USER"]
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]
    deployment = _yaml(BASE / "deployment.yaml")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_dockerfile_entrypoint_cmd_port_and_runtime_only_install() -> None:
    lines = _dockerfile()
    words = dict(lines)
    assert words["ENTRYPOINT"] == '["zaroz-exporter"]'
    assert words["CMD"] == '["serve"]'
    assert words["EXPOSE"] == f"{cli.DEFAULT_PORT} {cli.DEFAULT_PORT + 1}"  # metrics, webhook
    runs = " ".join(rest for word, rest in lines if word == "RUN")
    assert "pip install" in runs
    assert "[test]" not in runs and "[bench]" not in runs and " -e " not in runs
    assert not re.search(r"apt-get install|build-essential|gcc", runs)
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert ":latest" not in text


def test_dockerignore_sends_only_the_build_inputs() -> None:
    lines = [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "**"  # everything excluded first: no .venv, .git, bench/out, tokens
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = {src.rstrip("/") for word, rest in _dockerfile()
              if word == "COPY" and not rest.startswith("--from") for src in rest.split()[:-1]}
    assert copied and copied <= kept, copied - kept


def test_every_object_fits_a_client_side_apply() -> None:
    """`kubectl apply` (client-side) keeps the whole object in an annotation, and annotations
    are limited to 256 KiB in total: every manifest must fit, with room to spare, so the install
    needs no --server-side (deploy/README.md says so)."""
    limit = 256 * 1024
    sizes = {}
    for path in sorted((ROOT / "deploy").rglob("*.yaml")):
        if "helm" in path.relative_to(ROOT / "deploy").parts:
            continue  # chart templates are not YAML; tests/test_helm.py sizes what they render
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "metadata" in doc and doc.get("kind") not in ("Kustomization", "Component"):
                sizes[f"{path.name}:{doc['metadata']['name']}"] = len(json.dumps(doc))
    largest = max(sizes, key=sizes.__getitem__)
    assert sizes[largest] < limit // 2, (largest, sizes[largest])
    assert "dashboard" in largest  # the claim in deploy/README.md names the largest


def test_local_containerfile_keeps_the_dockerfiles_runtime() -> None:
    """Containerfile.local (.ci/image, where no registry is reachable) stands in for the
    Dockerfile: the same user, workdir, ports, entrypoint and command."""
    def runtime(text: str) -> list[str]:
        final = text.split("\nFROM ")[-1]  # the last stage
        return [line for line in final.splitlines()
                if line.startswith(("USER ", "WORKDIR ", "EXPOSE ", "ENTRYPOINT ", "CMD "))]
    docker = runtime((ROOT / "Dockerfile").read_text())
    local = runtime((ROOT / "Containerfile.local").read_text())
    assert docker == local and len(docker) == 5


def test_the_image_build_gets_every_file_the_wheel_force_includes() -> None:
    """hatchling fails on a force-included file missing from the build context: every source of
    pyproject's force-include is copied by both image files (directly or inside a copied folder)
    and let through .dockerignore."""
    import tomllib

    forced = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]["force-include"]
    for name in ("Dockerfile", "Containerfile.local"):
        copied = [src.rstrip("/") for line in (ROOT / name).read_text().splitlines()
                  if line.startswith("COPY ") and "--from" not in line
                  for src in line.split()[1:-1]]
        missing = [s for s in forced
                   if not any(s == c or s.startswith(c + "/") for c in copied)]
        assert not missing, (name, missing)
    kept = [line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.startswith("!")]
    assert all(any(s == k or s.startswith(k + "/") for k in kept) for s in forced)
