"""The demo is explorable with real kubectl: it writes a kubeconfig (0600) and prints the one
command to use it; a user who breaks a live UnitSignal's spec with `kubectl patch` (a label key
the agent refuses and the API server admits) sees its generation go unobserved: the stuck
generation series and the overview's invalid-spec count move. Fails under CI without kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import stat
import time
from typing import Any

import aiohttp

from exporter.cli import build_parser
from exporter.commands.demo import Demo, start_demo
from tests.simlogs import parse
from tests.test_deploy_build import _kubectl


async def kubectl(binary: str, command: str, *args: str) -> str:
    """`command` as the demo printed it (KUBECONFIG=… kubectl …), with `args` instead of its
    own arguments: run with the environment variable it sets, as a user's shell would."""
    words = shlex.split(command)
    assert words[0].startswith("KUBECONFIG=") and words[1] == "kubectl"
    env = {"KUBECONFIG": words[0].split("=", 1)[1], "PATH": os.environ.get("PATH", "/usr/bin"),
           "HOME": os.path.dirname(words[0].split("=", 1)[1])}
    proc = await asyncio.create_subprocess_exec(binary, *args, env=env,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


async def watched_lines(binary: str, command: str, want: int) -> list[str]:
    """The printed command itself, run until it has shown `want` lines (the demo writes many
    a second), then stopped."""
    words = shlex.split(command)
    env = {"KUBECONFIG": words[0].split("=", 1)[1], "PATH": os.environ.get("PATH", "/usr/bin"),
           "HOME": os.path.dirname(words[0].split("=", 1)[1])}
    proc = await asyncio.create_subprocess_exec(binary, *words[2:], env=env,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        while len(lines) < want:
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            if not line:
                break
            lines.append(line.decode())
    finally:
        proc.kill()
        await proc.wait()
    return lines


async def overview(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/api/overview") as r:
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data["unitsignals"]


async def series(session: aiohttp.ClientSession, url: str, name: str,
                 unitsignal: str) -> float | None:
    async with session.get(f"{url}/metrics") as r:
        samples = parse(await r.text())
    found = [v for (m, labels), v in samples.items()
             if m == name and ("unitsignal", unitsignal) in labels]
    return found[0] if found else None


def test_the_demo_prints_the_kubectl_command_and_removes_its_kubeconfig(capsys) -> None:
    from exporter.commands import demo

    args = build_parser().parse_args(["demo", "--listen", "127.0.0.1:0", "--log-level",
                                      "warning", "--history", "5", "--duration", "1"])
    assert demo.main(args) == 0
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    (command,) = [line for line in lines if line.endswith(" kubectl get unitsignals -A -w")]
    path = shlex.split(command)[0].split("=", 1)[1]
    assert path.endswith("/kubeconfig") and not os.path.exists(path)


async def test_kubectl_breaks_a_spec_and_the_stuck_generation_series_move() -> None:
    binary = _kubectl()
    args = build_parser().parse_args(["demo", "--listen", "127.0.0.1:0", "--log-level",
                                      "warning", "--history", "60"])
    demo: Demo = await start_demo(args)
    path = demo.kubeconfig.path
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        command = demo.kubeconfig.command()
        assert command == f"KUBECONFIG={shlex.quote(str(path))} kubectl get unitsignals -A -w"
        url = demo.running.url
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            while not demo.running.ready():
                assert time.monotonic() < deadline, demo.running.readiness()
                await asyncio.sleep(0.1)
            listed = json.loads(await kubectl(binary, command, "get", "unitsignals", "-A",
                                              "-o", "json"))
            assert len(listed["items"]) >= 3
            # `-w`: the listing, then a line for each change as the demo writes.
            shown = await watched_lines(binary, command, len(listed["items"]) + 20)
            assert len(shown) == len(listed["items"]) + 20
            assert shown[0].split()[:2] == ["NAMESPACE", "NAME"]
            # The youngest UnitSignals whose agents acknowledge (the longest left to live).
            healthy = {(u.namespace, u.name) for u in demo.mirror.units.values()
                       if not (u.stuck or u.invalid)}
            items = sorted((o for o in listed["items"]
                            if (o["metadata"]["namespace"], o["metadata"]["name"]) in healthy
                            and o.get("status", {}).get("observedGeneration")
                            == o["spec"]["generation"]),
                           key=lambda o: o["metadata"]["creationTimestamp"], reverse=True)[:2]
            assert items, "no UnitSignal with an acknowledging agent to break"
            before = await overview(session, url)
            broken = []
            for o in items:
                ns, name = o["metadata"]["namespace"], o["metadata"]["name"]
                gen = o["spec"]["generation"] + 1
                patch = {"spec": {"generation": gen, "labels": {"Not A Label Key": "x"}}}
                await kubectl(binary, command, "patch", "unitsignal", name, "-n", ns,
                              "--type", "merge", "-p", json.dumps(patch))
                broken.append(f"{ns}/{name}")
            still: list[str] = []
            deadline = time.monotonic() + 30
            while True:
                now = await overview(session, url)
                listed_now = {f"{r['namespace']}/{r['name']}" for r in now["stuck_invalid_spec"]}
                alive = json.loads(await kubectl(binary, command, "get", "unitsignals", "-A",
                                                 "-o", "json"))["items"]
                names = {f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in alive}
                still = [k for k in broken if k in names]
                if still and set(still) <= listed_now:
                    break
                assert time.monotonic() < deadline, (broken, still, listed_now)
                await asyncio.sleep(0.5)
            assert now["stuck_invalid_spec_total"] >= len(still)
            assert not set(still) & {f"{r['namespace']}/{r['name']}"
                                     for r in before["stuck_invalid_spec"]}
            for key in still:
                name = key.split("/", 1)[1]
                lag = await series(session, url, "zaroz_unitsignal_generation_lag", name)
                stuck = await series(session, url,
                                     "zaroz_unitsignal_generation_stuck_invalid_spec", name)
                valid = await series(session, url, "zaroz_unitsignal_spec_valid", name)
                if lag is None:  # destroyed in between
                    continue
                assert lag >= 1 and stuck == 1 and valid == 0, (key, lag, stuck, valid)
    finally:
        await demo.stop()
    assert not path.exists()
