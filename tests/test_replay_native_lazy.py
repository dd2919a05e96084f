"""`replay` computes native buckets only for the output that shows them (protobuf): text and
OpenMetrics output are byte for byte what `--native-histogram-schema off` gives, without a single
native observation, and the protobuf output still carries them."""

from __future__ import annotations

import orjson
import pytest

from exporter.cli import main
from exporter.sinks.metrics.native import NativeBuckets
from tests import pbdecode
from tests.simlogs import finite_logs

LOGS, _ = finite_logs(seed=7, workloads=2, seconds=240)

HISTOGRAMS = ("zaroz_unit_ready_seconds", "zaroz_unit_allocation_ack_seconds",
              "zaroz_unit_drain_seconds")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The simulator's logs, a JSONL file per workload."""
    d = tmp_path_factory.mktemp("logs")
    for wl, evs in LOGS.items():
        (d / f"{wl}.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in evs))
    return sorted(str(p) for p in d.iterdir())


@pytest.fixture
def native_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts every native observation (and every native series made) in this process."""
    calls = [0, 0]  # observations, series
    observe, init = NativeBuckets.observe_ns, NativeBuckets.__init__

    def counting_observe(self: NativeBuckets, ns: int) -> None:
        calls[0] += 1
        observe(self, ns)

    def counting_init(self: NativeBuckets, config: object) -> None:
        calls[1] += 1
        init(self, config)  # type: ignore[arg-type]

    monkeypatch.setattr(NativeBuckets, "observe_ns", counting_observe)
    monkeypatch.setattr(NativeBuckets, "__init__", counting_init)
    return calls


def _replay(capsysbinary: pytest.CaptureFixture[bytes], *args: str) -> bytes:
    assert main(["replay", *args]) == 0
    return capsysbinary.readouterr().out


@pytest.mark.parametrize("fmt", ["text", "openmetrics"])
def test_text_output_is_the_same_and_computes_no_native_bucket(files, capsysbinary, native_calls,
                                                               fmt):
    default = _replay(capsysbinary, "--format", fmt, *files)
    assert native_calls == [0, 0]  # not one native series, not one native observation
    off = _replay(capsysbinary, "--format", fmt, "--native-histogram-schema", "off", *files)
    schema5 = _replay(capsysbinary, "--format", fmt, "--native-histogram-schema", "5", *files)
    assert native_calls == [0, 0]
    assert default == off == schema5
    assert b"zaroz_unit_ready_seconds_count{" in default  # the histograms are there


def test_summary_computes_no_native_bucket(files, capsysbinary, native_calls):
    out = _replay(capsysbinary, "--summary", *files)
    assert native_calls == [0, 0] and b"ready" in out


def test_protobuf_output_still_carries_native_buckets(files, capsysbinary, native_calls):
    data = _replay(capsysbinary, "--format", "protobuf", *files)
    assert native_calls[0] > 100 and native_calls[1] > 0
    fams = {mf.name: mf for mf in pbdecode.families(data)}
    for name in HISTOGRAMS:
        for m in fams[name].metric:
            h = m.histogram
            assert h.schema == 3
            assert sum(pbdecode.native_buckets(h).values()) + h.zero_count == h.sample_count
    classic = _replay(capsysbinary, "--format", "protobuf", "--native-histogram-schema", "off",
                      *files)
    for mf in pbdecode.families(classic):
        if mf.name in HISTOGRAMS:
            assert all(not m.histogram.positive_span for m in mf.metric)
    # the classic halves agree whether the native ones were computed or not
    assert {k: v for k, v in pbdecode.samples(data).items()} == pbdecode.samples(classic)
