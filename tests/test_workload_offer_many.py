"""WorkloadLog.offer_many (replay's batch path, the usual case inline) makes exactly the observer
and tap calls, in the same order, and ends in the same state as `offer` line by line."""

from __future__ import annotations

import gzip
import random
import re

import orjson
import pytest

from exporter.model.observations import Recorder
from exporter.model.workload import WorkloadLog
from tests.data.replay_golden.make import inputs

NOT_JSON = object()


def _decoded(path) -> list[object]:
    out: list[object] = []
    for line in gzip.decompress(path.read_bytes()).splitlines():
        if line.strip():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                out.append(NOT_JSON)
    return out


def _log() -> tuple[WorkloadLog, Recorder, list[tuple]]:
    rec = Recorder()
    log = WorkloadLog(rec, max_pending=50)
    taps: list[tuple] = []
    log.tap = lambda *a: taps.append(a)
    return log, rec, taps


@pytest.mark.parametrize("path", inputs(), ids=lambda p: p.name)
def test_offer_many_equals_offer_one_by_one(path):
    objs = _decoded(path)
    assert sum(o is NOT_JSON for o in objs) > 10
    one, rec1, taps1 = _log()
    for o in objs:
        if o is NOT_JSON:
            one.reject_json()
        else:
            one.offer(o)
    many, rec2, taps2 = _log()
    rnd = random.Random(5)
    i = 0
    while i < len(objs):
        n = rnd.randint(1, 64)
        many.offer_many(objs[i : i + n], NOT_JSON)
        i += n
    assert len(rec1.calls) > 10_000
    assert rec2.calls == rec1.calls
    assert taps2 == taps1
    one.flush()
    many.flush()
    assert rec2.calls == rec1.calls
    assert many.snapshot() == one.snapshot()


def test_offer_many_takes_the_general_path_for_what_is_not_the_next_seq():
    """Reordered, repeated and invalid events in one batch: counted as offer counts them."""
    base = {"id": "evt_" + "0" * 32, "contract_version": 1, "service_instance_id": "p",
            "occurred_at": "2026-01-01T00:00:00Z", "unit": None, "data": {}}
    evs = [base | {"seq": s, "type": "units.scaled", "data": {"from": 0, "to": s, "reason": "r"}}
           for s in (1, 3, 2, 2, 4)]
    evs.append(base | {"seq": 5, "type": "webhook.ping"})
    evs.append({"seq": 5, "type": "unit.created"})  # fails the schema, uses up seq 5
    evs.append(base | {"seq": 6.0, "type": "units.scaled",
                       "data": {"from": 0, "to": 6, "reason": "r"}})
    log, rec, _ = _log()
    log.offer_many(evs, NOT_JSON)
    assert rec.of("desired") == [(1,), (2,), (3,), (4,), (6,)]
    assert rec.of("duplicate") == [("file",)]
    assert rec.of("invalid") == [("schema",)]
    assert rec.of("ping") == [(5,)]
    assert log.applied_through == 6


@pytest.mark.parametrize("path", inputs(), ids=lambda p: p.name)
def test_offer_many_renders_what_offer_renders(path):
    """Through WorkloadMetrics: the exposition, series order included, is the same as from
    `offer` line by line."""
    from exporter.sinks.metrics.exposition import render_bytes
    from exporter.sinks.metrics.family import Registry
    from exporter.sinks.metrics.workload import WorkloadMetrics

    objs = _decoded(path)
    bodies = []
    for batched in (False, True):
        reg = Registry()
        log = WorkloadLog(WorkloadMetrics(reg, "w"), max_pending=50)
        if batched:
            for i in range(0, len(objs), 32):
                log.offer_many(objs[i : i + 32], NOT_JSON)
        else:
            for o in objs:
                log.reject_json() if o is NOT_JSON else log.offer(o)
        log.flush()
        bodies.append(render_bytes(reg))
    assert b'zaroz_events_total{workload="w",type="unit.ready"}' in bodies[0]
    assert bodies[1] == bodies[0]


def _recorded_one_by_one(pipeline, paths, cursor) -> None:
    """The report's recording path as it was before it took offer_many: `offer` line by line,
    the line of an event left waiting noted after each offer; the same batches and expiry."""
    from exporter.commands.replay import EXPIRE_EVERY
    from exporter.report.record import NOT_JSON as REPORT_NOT_JSON
    from exporter.report.record import _batches, _chain, report_metrics
    from exporter.sources.files import LogFile, workload_of

    for p in paths:
        path = LogFile(p, workload_of(p))
        log = pipeline.workload(path.workload)
        obs = report_metrics(log)
        if obs.timelines.log is None:
            log.tap = _chain(log.tap, obs.timelines.tap_for(log))
        cursor.file = path.short_name
        n = 0
        for batch in _batches(path, cursor):
            for obj in cursor.start(batch):
                if obj is REPORT_NOT_JSON:
                    log.reject_json()
                    continue
                log.offer(obj)
                seq = cursor.seq
                if log.pending and seq in log.pending and seq not in obs.waiting:
                    obs.waiting[seq] = (cursor.file, cursor.line)
            n += len(batch)
            if n >= EXPIRE_EVERY:
                n = 0
                pipeline.expire_workload(path.workload, log.clock)
                obs.timelines.finish_all(log.units)
                obs.forget_applied(log.applied_through)
    for name, log in pipeline.logs.items():
        cursor.end("(end of input)")
        log.flush()
        pipeline.expire_workload(name, log.clock)
        report_metrics(log).timelines.finish_all()


def test_the_reports_batched_recording_equals_offer_one_by_one():
    """The report's recording path (offer_many, the cursor following the batch's iterator)
    records what `offer` line by line records: every anomaly with its file, line and seq (skews
    of events that waited behind a gap included), every headline point, the kept timelines,
    and renders the same report and exposition."""
    from exporter.report.record import Cursor, apply_files_recorded, recording, report_metrics
    from exporter.report.render import render as render_report
    from exporter.sinks.metrics.exposition import render_bytes
    from exporter.sinks.metrics.family import Registry
    from exporter.wiring.events import Pipeline

    runs = []
    for batched in (False, True):
        cursor = Cursor()
        pipeline = Pipeline(Registry(), observer_factory=recording(cursor))
        if batched:
            apply_files_recorded(pipeline, inputs(), None, cursor)
        else:
            _recorded_one_by_one(pipeline, inputs(), cursor)
        runs.append(pipeline)
    one, many = runs
    assert list(many.logs) == list(one.logs)
    for name in one.logs:
        a, b = report_metrics(one.logs[name]), report_metrics(many.logs[name])
        kinds = {k for k, *_ in a.anomalies}
        assert kinds == {"duplicate", "gap", "invalid", "clock skew"}, name
        located = [line for _, f, line, _, _ in a.anomalies if f != "(end of input)"]
        assert len(located) > 50 and all(line > 0 for line in located)
        assert b.anomalies == a.anomalies
        assert b.points == a.points
        assert b.timelines.kept == a.timelines.kept
        assert len(a.timelines.kept) > 0
    names = [p.name for p in inputs()]
    assert render_report(many, names) == render_report(one, names)
    assert render_bytes(many.registry) == render_bytes(one.registry)


def test_an_unhashable_seq_while_an_event_waits_is_an_invalid_line_in_the_report(tmp_path):
    """It crashed the report's recording path (`seq in log.pending` of a list) before."""
    from exporter.cli import main

    evs = [orjson.loads(line) for line in
           gzip.decompress(inputs()[0].read_bytes()).splitlines()[:3]]
    assert [e["seq"] for e in evs] == [1, 2, 3]
    log = tmp_path / "w.jsonl"
    log.write_bytes(b"\n".join([orjson.dumps(evs[0]), orjson.dumps(evs[2]),  # 3 waits for 2
                                b'{"seq": [1], "type": "unit.created"}', orjson.dumps(evs[1])]))
    out = tmp_path / "r.html"
    assert main(["replay", "--report", str(out), str(log)]) == 0
    rows = re.findall(r'data-kind="([a-z ]+)"><td>[^<]*</td><td><code>([^<]*)</code>',
                      out.read_text())
    assert rows == [("invalid", "w.jsonl:3")]


def test_the_cursor_follows_offer_many_through_the_batch():
    """Every observer call made while offer_many applies a batch (inline or through `slow`)
    sees the cursor at the line being applied, blank lines counted; after the batch, at its
    last line; at the end of input, at none."""
    from exporter.report.record import Cursor

    objs = [o for o in _decoded(inputs()[0]) if o is not NOT_JSON][:40]
    cursor = Cursor()

    class Lines(Recorder):
        def applied(self, type_label: str, seq: int) -> None:
            self.calls.append(("applied", seq, cursor.line, cursor.seq))

    rec = Lines()
    log = WorkloadLog(rec)
    batch = objs[:20]
    cursor.base, cursor.linemap = 100, [k + 2 for k in range(20)]  # a blank line first
    log.offer_many(cursor.start(batch), NOT_JSON, "file", log.offer)
    applied = rec.of("applied")
    assert [(seq, line) for seq, line, _ in applied] == [(k + 1, 102 + k) for k in range(20)]
    assert all(seq == s for s, _, seq in applied)
    assert cursor.line == 121 and cursor.obj is batch[-1]
    cursor.linemap = None
    log.offer_many(cursor.start(objs[20:]), NOT_JSON)
    assert rec.of("applied")[-1][1:] == (120, 40)  # base 100, the second batch's 20th line
    cursor.end("(end of input)")
    assert (cursor.line, cursor.obj, cursor.seq) == (0, None, None)
