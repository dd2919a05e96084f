"""Family allow/deny/opt-in lists with kube-state-metrics semantics, and what a family not
exported costs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import catalog
from exporter.sinks.metrics.exposition import render_bytes
from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.selection import EVERYTHING, FamilyFilter, FamilyListError
from exporter.wiring.unitsignals import build_cluster
from tests.unitsignals import T0, status, unitsignal

ROOT = Path(__file__).resolve().parent.parent
PER_OBJECT = {m.name for m in catalog.METRICS if m.per_object}
ALL = [m.name for m in catalog.METRICS]


def exported(f: FamilyFilter) -> set[str]:
    return {n for n in ALL if f.included(n)}


def test_default_exports_all_but_the_opt_in_families():
    opt_in = {m.name for m in catalog.METRICS if m.opt_in}
    assert opt_in == {"zaroz_unitsignal_status_seq"}
    assert exported(FamilyFilter.parse()) == set(ALL) - opt_in
    assert exported(FamilyFilter.parse(opt_in=["status_seq"])) == set(ALL)
    assert exported(EVERYTHING) == set(ALL)


def test_denylist_regex_matches_anywhere_in_the_name():
    got = exported(FamilyFilter.parse(deny=["zaroz_unitsignal_.*"]))
    assert not {n for n in got if n.startswith("zaroz_unitsignal_")}
    assert "zaroz_workload_unitsignals" in got and "zaroz_events_total" in got
    got = exported(FamilyFilter.parse(deny=["_total"]))  # unanchored, as kube-state-metrics
    assert not {n for n in got if n.endswith("_total")}
    assert "zaroz_events_last_seq" in got


def test_allowlist_exports_only_what_it_matches_and_opt_in_still_applies():
    f = FamilyFilter.parse(allow=["^zaroz_unitsignal_(ready|status_seq)$", "zaroz_events_total"])
    assert exported(f) == {"zaroz_unitsignal_ready", "zaroz_events_total"}
    f = FamilyFilter.parse(allow=["^zaroz_unitsignal_(ready|status_seq)$"], opt_in=["status_seq"])
    assert exported(f) == {"zaroz_unitsignal_ready", "zaroz_unitsignal_status_seq"}


def test_allow_and_deny_are_mutually_exclusive_and_regexes_must_compile():
    with pytest.raises(FamilyListError, match="mutually exclusive"):
        FamilyFilter.parse(allow=["a"], deny=["b"])
    with pytest.raises(FamilyListError, match="not a regular expression") as e:
        FamilyFilter.parse(deny=["zaroz_(unit"])
    assert e.value.flag == "--metric-denylist"


def test_unmatched_patterns_are_reported():
    f = FamilyFilter.parse(deny=["zaroz_unitsignal_.*", "zaroz_typo_x"])
    assert f.unmatched(ALL) == ["zaroz_typo_x"]


def _cluster(f: FamilyFilter, n: int = 40):
    reg = Registry()
    reg.select(f.included)
    model, sink = build_cluster(reg, ["team"], clock=lambda: T0 + 5)
    for i in range(n):
        model.upsert(unitsignal(f"u{i}", generation=2, status_=status(seq=7)), T0)
    return reg, sink


def _families(text: bytes) -> set[str]:
    return {line.split()[2] for line in text.decode().splitlines()
            if line.startswith("# TYPE ")}


def test_denied_per_object_families_are_neither_exposed_nor_stored():
    reg, sink = _cluster(FamilyFilter.parse(deny=["zaroz_unitsignal_.*"]))
    text = render_bytes(reg)
    assert b'unitsignal="' not in text  # no per-object series at all
    assert not _families(text) & PER_OBJECT
    assert sink.rows is None  # nothing stored per object
    # what is per workload and not denied still counts the objects
    assert b'zaroz_workload_unitsignals{workload="wl-1",phase="starting"} 40' in text
    assert reg.series_count() == sum(1 for line in text.splitlines()
                                     if line and not line.startswith(b"#"))


def test_one_per_object_family_left_is_the_only_column():
    reg, sink = _cluster(FamilyFilter.parse(allow=["^zaroz_unitsignal_ready$"]))
    assert sink.rows is not None and len(sink.rows.columns) == 1
    text = render_bytes(reg)
    assert _families(text) == {"zaroz_unitsignal_ready"}
    assert text.count(b"zaroz_unitsignal_ready{") == 40


def test_default_and_opted_in_status_seq():
    reg, _ = _cluster(FamilyFilter.parse())
    assert b"zaroz_unitsignal_status_seq" not in render_bytes(reg)
    assert b'zaroz_unitsignal_info{' in render_bytes(reg)
    reg, _ = _cluster(FamilyFilter.parse(opt_in=["status_seq"]))
    assert render_bytes(reg).count(b"zaroz_unitsignal_status_seq{") == 40


@pytest.mark.parametrize("argv,needle", [
    (["--metric-allowlist", "a", "--metric-denylist", "b"], "mutually exclusive"),
    (["--metric-denylist", "zaroz_(x"], "not a regular expression"),
])
def test_list_mistakes_are_one_line_config_errors(argv, needle):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAROZ_EXPORTER_")}
    res = subprocess.run([sys.executable, "-m", "exporter.cli", "serve", "--kube", "off",
                          "--listen", "127.0.0.1:0", "--events-url", "http://127.0.0.1:9/",
                          *argv], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert len(res.stderr.splitlines()) == 1 and needle in res.stderr, res.stderr
    assert "--metric-" in res.stderr


async def test_serve_with_the_denylist_exposes_no_per_object_series():
    import aiohttp

    from exporter.cli import build_parser
    from exporter.commands.config import ServeConfig
    from exporter.commands.serve import start
    from tests.waiting import until
    from zaroz_sim.kube.emulator import KubeEmulator

    emu = KubeEmulator()
    url = await emu.start()
    for i in range(30):
        emu.create("team-a", f"u{i}", {
            "unitId": f"unit-{i}", "key": f"k{i}", "contractVersion": 1, "generation": 1,
            "userData": {}, "allocation": None, "draining": False},
            labels={"units.zaroz.cloud/workload": "wl-1"})
    runs = []
    try:
        for extra in ([], ["--metric-denylist", "zaroz_unitsignal_.*"]):
            args = build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "on",
                                              "--kube-api-url", url, *extra])
            running = await start(ServeConfig.from_args(args))
            try:
                await until(running.ready, 10, interval=0.05)
                async with aiohttp.ClientSession() as s, s.get(f"{running.url}/metrics") as r:
                    runs.append(await r.text())
            finally:
                await running.stop()
    finally:
        await emu.stop()
    default, denied = runs
    assert default.count('unitsignal="') >= 30 * 11
    assert 'unitsignal="' not in denied
    assert 'zaroz_workload_unitsignals{workload="wl-1",phase="starting"} 30' in denied
    assert "zaroz_kube_objects" in denied
