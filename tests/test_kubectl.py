"""Real kubectl (client-go) against the emulator on loopback, through a kubeconfig file: discovery,
server-side printing, -o json, --watch, a chunked list during writes, apply (valid and refused),
merge patch with a null, delete, explain, the CRD. Fails under CI when kubectl is missing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_deploy_build import _kubectl
from zaroz_sim.kube.emulator import KubeEmulator

WL = {"units.zaroz.cloud/workload": "wl-1"}


def spec(i: int, **over: Any) -> dict[str, Any]:
    return {"unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1} | over


def status(seq: int = 1) -> dict[str, Any]:
    return {"observedGeneration": 1, "agentVersion": "1.4.2", "accepting": True, "seq": seq,
            "activity": "idle", "signalledReady": "2026-01-01T00:00:00Z"}


@dataclass
class Kubectl:
    binary: str
    kubeconfig: Path
    home: Path

    async def run(self, *args: str, check: bool = True, stdin: bytes | None = None,
                  cache: str = "cache") -> tuple[int, str, str]:  # fmt: skip
        proc = await asyncio.create_subprocess_exec(
            self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.home / cache}",
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={"HOME": str(self.home), "PATH": "/usr/bin"})
        out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
        code = proc.returncode
        assert code is not None
        if check:
            assert code == 0, f"kubectl {' '.join(args)}: {err.decode()}"
        return code, out.decode(), err.decode()


@pytest.fixture
async def emu() -> AsyncIterator[KubeEmulator]:
    e = KubeEmulator(seed=11, bookmark_interval_s=1.0)  # no token: client-go sends none over http
    for i in range(7):
        e.create(f"team-{i % 2}", f"u{i}", spec(i), labels=WL, status=status())
    await e.start()
    yield e
    await e.stop()


@pytest.fixture
def kubectl(emu: KubeEmulator, tmp_path: Path) -> Kubectl:
    binary = _kubectl()
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "emu",
              "clusters": [{"name": "emu", "cluster": {"server": emu.url}}],
              "users": [{"name": "emu", "user": {}}],
              "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu",
                                                       "namespace": "team-0"}}]}  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Kubectl(binary, path, tmp_path)


async def test_api_resources_lists_the_resource_with_the_verbs_it_serves(
    kubectl: Kubectl,
) -> None:
    _, out, _ = await kubectl.run("api-resources", "-o", "wide", "--no-headers")
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert "units.zaroz.cloud/v1" in rows["unitsignals"] and "true" in rows["unitsignals"]
    verbs = rows["unitsignals"].split()[-1].strip("[]").split(",")
    assert sorted(verbs) == ["create", "delete", "deletecollection", "get", "list", "patch",
                             "update", "watch"]
    assert "customresourcedefinitions" in rows


async def test_get_all_namespaces_json_is_the_store(emu: KubeEmulator, kubectl: Kubectl) -> None:
    _, out, _ = await kubectl.run("get", "unitsignals", "-A", "-o", "json", "--show-managed-fields")
    items = json.loads(out)["items"]
    assert {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items} == {
        tuple(k.split("/")) for k in emu.store.objects}
    assert all(o == emu.get(o["metadata"]["namespace"], o["metadata"]["name"]) for o in items)


async def test_get_prints_the_crds_printer_columns(emu: KubeEmulator, kubectl: Kubectl) -> None:
    emu.patch_status("team-0", "u0", {"activity": "busy"})
    _, out, _ = await kubectl.run("get", "unitsignals")
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "UNIT", "GENERATION", "OBSERVED", "READY", "ACCEPTING",
                              "ACTIVITY", "DRAINING", "AGE"]
    first = rows[0].split()
    assert first[:3] == ["u0", "unit-0", "1"] and "busy" in first
    assert len(rows) == 4  # team-0's objects: the kubeconfig's namespace


async def test_watch_shows_events_as_they_arrive(emu: KubeEmulator, kubectl: Kubectl) -> None:
    proc = await asyncio.create_subprocess_exec(
        kubectl.binary, f"--kubeconfig={kubectl.kubeconfig}",
        f"--cache-dir={kubectl.home / 'cache'}", "get", "unitsignals", "--watch",
        "--output-watch-events", "-o", "jsonpath={.type} {.object.metadata.name} "
        "{.object.status.seq}{\"\\n\"}", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={"HOME": str(kubectl.home)})
    assert proc.stdout is not None
    try:
        seen: list[str] = []
        while len(seen) < 4:  # the state first: team-0's four objects
            seen.append((await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip())
        assert {s.split()[0] for s in seen} == {"ADDED"}
        emu.patch_status("team-0", "u2", {"seq": 42})
        emu.delete("team-0", "u4")
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        assert line == ["MODIFIED", "u2", "42"]
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        assert line[:2] == ["DELETED", "u4"]
    finally:
        proc.kill()
        await proc.wait()


async def test_chunked_list_while_writes_happen(emu: KubeEmulator, kubectl: Kubectl) -> None:
    for i in range(7, 40):
        emu.create("team-0", f"u{i}", spec(i), labels=WL, status=status())
    expected = {k.split("/")[1] for k in emu.store.objects}
    stop = asyncio.Event()

    async def write() -> None:  # thousands of writes between pages (at most 20k: the history
        n = 0  # holds 100k; a count of 1,000, as it was, expired the pages' resourceVersion)
        while not stop.is_set() and n < 20_000:
            n += 1
            emu.patch_status("team-0", f"u{n % 40 // 2 * 2}", {"seq": n})
            await asyncio.sleep(0)

    writer = asyncio.create_task(write())
    try:
        _, out, _ = await kubectl.run("get", "unitsignals", "-A", "--chunk-size=3", "-o", "name")
    finally:
        stop.set()
        await writer
    assert {line.split("/")[1] for line in out.split()} == expected
    pages = [r for r in emu.request_log if r.kind == "list" and r.query.get("limit") == "3"]
    assert len(pages) == -(-len(expected) // 3) and sum("continue" in p.query for p in pages) \
        == len(pages) - 1


async def test_apply_valid_then_invalid_is_refused_with_the_servers_reason(
    emu: KubeEmulator, kubectl: Kubectl
) -> None:
    manifest = {"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal",
                "metadata": {"name": "applied", "labels": WL},
                "spec": spec(100, allocation={"id": "a1", "generation": 1})}
    _, out, _ = await kubectl.run("apply", "-f", "-", stdin=json.dumps(manifest).encode())
    assert "created" in out
    stored = emu.get("team-0", "applied")
    assert stored["spec"] == manifest["spec"]
    assert "kubectl.kubernetes.io/last-applied-configuration" in stored["metadata"]["annotations"]
    assert stored["metadata"]["managedFields"][0]["manager"] == "kubectl-client-side-apply"
    manifest["spec"]["generation"] = 2
    _, out, _ = await kubectl.run("apply", "-f", "-", stdin=json.dumps(manifest).encode())
    assert "configured" in out and emu.get("team-0", "applied")["metadata"]["generation"] == 2
    bad = manifest | {"metadata": {"name": "bad"}, "spec": spec(101, key="Not A Valid Key")}
    code, _, err = await kubectl.run("apply", "-f", "-", stdin=json.dumps(bad).encode(),
                                     check=False)
    assert code != 0 and "team-0/bad" not in emu.store.objects
    assert 'The UnitSignal "bad" is invalid: spec.key: Invalid value: "Not A Valid Key"' in err


async def test_merge_patch_null_deletes_then_delete(emu: KubeEmulator, kubectl: Kubectl) -> None:
    emu.update_spec("team-0", "u0", spec(0, allocation={"id": "a1", "generation": 1}))
    before = emu.get("team-0", "u0")["metadata"]["generation"]
    await kubectl.run("patch", "unitsignal", "u0", "--type", "merge",
                      "-p", '{"spec":{"allocation":null,"draining":"stop"}}')
    obj = emu.get("team-0", "u0")
    assert "allocation" not in obj["spec"] and obj["spec"]["draining"] == "stop"
    assert obj["metadata"]["generation"] == before + 1
    code, _, err = await kubectl.run("patch", "unitsignal", "u0", "--type", "merge",
                                     "-p", '{"spec":{"contractVersion":2}}', check=False)
    assert code != 0 and "spec.contractVersion" in err
    _, out, _ = await kubectl.run("delete", "unitsignal", "u0")
    assert "deleted" in out and "team-0/u0" not in emu.store.objects


async def test_explain_reads_the_published_schema(kubectl: Kubectl) -> None:
    _, out, _ = await kubectl.run("explain", "unitsignal.spec")
    assert "KIND:       UnitSignal" in out and "GROUP:      units.zaroz.cloud" in out
    assert "key\t<string> -required-" in out and "unitId\t<string> -required-" in out
    _, out, _ = await kubectl.run("explain", "unitsignal.status.seq")
    assert "Monotonic per agent start." in out


async def test_the_crd_shows_and_goes(emu: KubeEmulator, kubectl: Kubectl) -> None:
    _, out, _ = await kubectl.run("get", "crd")
    assert "unitsignals.units.zaroz.cloud" in out
    _, out, _ = await kubectl.run("get", "crd", "unitsignals.units.zaroz.cloud", "-o", "json")
    crd = json.loads(out)
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
    emu.uninstall_crd()
    _, out, _ = await kubectl.run("get", "crd", "-o", "name")
    assert out.strip() == ""
    code, _, err = await kubectl.run("get", "unitsignals", check=False, cache="fresh")
    assert code != 0 and 'the server doesn\'t have a resource type "unitsignals"' in err


async def test_get_namespaces_shows_where_the_units_are(
    emu: KubeEmulator, kubectl: Kubectl
) -> None:
    _, out, _ = await kubectl.run("get", "namespaces", "--no-headers")
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["default", "Active"], ["team-0", "Active"], ["team-1", "Active"]]
    emu.create("team-new", "x", spec(99))
    _, out, _ = await kubectl.run("get", "ns", "team-new", "-o", "name")
    assert out.strip() == "namespace/team-new"
    code, _, err = await kubectl.run("get", "ns", "nowhere", check=False)
    assert code != 0 and 'namespaces "nowhere" not found' in err


async def test_server_side_apply(emu: KubeEmulator, kubectl: Kubectl) -> None:
    manifest = {"apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal",
                "metadata": {"name": "ssa"}, "spec": spec(7, draining="stop")}
    _, out, _ = await kubectl.run("apply", "--server-side", "-f", "-",
                                  stdin=json.dumps(manifest).encode())
    assert "serverside-applied" in out and emu.get("team-0", "ssa")["spec"]["draining"] == "stop"
    assert emu.get("team-0", "ssa")["metadata"]["managedFields"][0]["operation"] == "Apply"
    del manifest["spec"]["draining"]
    await kubectl.run("apply", "--server-side", "-f", "-", stdin=json.dumps(manifest).encode())
    assert "draining" not in emu.get("team-0", "ssa")["spec"]
