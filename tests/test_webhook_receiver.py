"""The webhook receiver (platform.md 2b) through aiohttp's test client: the signature matrix,
limits, headers, secret rotation, answers and their counts."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.sinks.metrics.webhook import WebhookMetrics
from exporter.sources.intake import Intake
from exporter.sources.webhook import (
    PATH,
    SecretFiles,
    WebhookReceiver,
    parse_signature,
    sign,
)
from exporter.wiring.events import Pipeline
from tests.envelopes import Log

NOW = 1_900_000_000
OLD, NEW = b"old-secret-0123456789", b"new-secret-9876543210"


class Rig:
    def __init__(self, client: TestClient, pipeline: Pipeline, secret_file: Path) -> None:
        self.client = client
        self.pipeline = pipeline
        self.secret_file = secret_file
        self.log = Log()

    def event(self, type_: str = "unit.created", **kw: Any) -> dict[str, Any]:
        return self.log.add(type_, unit=kw.pop("unit", f"u{self.log.seq + 1}"), **kw)

    async def post(self, body: bytes | dict[str, Any], *, secret: bytes = OLD, t: int = NOW,
                   workload: str | None = "wl-1", ctype: str = "application/json",
                   signature: str | None = None, drop: tuple[str, ...] = ()) -> tuple[int, Any]:
        raw = body if isinstance(body, bytes) else orjson.dumps(body)
        headers = {"Content-Type": ctype, "Zaroz-Delivery": "dlv_1",
                   "Zaroz-Signature": signature or f"t={t},v1={sign(secret, t, raw)}"}
        if workload is not None:
            headers["Zaroz-Workload"] = workload
        for h in drop:
            headers.pop(h, None)
        r = await self.client.post(PATH, data=raw, headers=headers)
        return r.status, await r.json()

    def count(self, name: str, *labels: str) -> float:
        s = self.pipeline.registry[name].series.get(labels)
        return s.value if s is not None else 0

    def applied(self) -> int:
        wl = self.pipeline.logs.get("wl-1")
        return wl.applied_through if wl else 0


@pytest.fixture
async def rig(tmp_path: Path):
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(OLD + b"\n")
    pipeline = Pipeline()
    metrics = WebhookMetrics(pipeline.registry)
    app = web.Application()
    WebhookReceiver(Intake(pipeline, metrics), SecretFiles([secret_file], metrics), metrics,
                    max_body=4096, clock=lambda: NOW).install(app)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield Rig(client, pipeline, secret_file)
    await client.close()


async def test_signed_delivery_is_applied_and_duplicate_acknowledged(rig: Rig):
    ev = rig.event()
    assert await rig.post(ev) == (200, {"result": "accepted"})
    assert await rig.post(ev) == (200, {"result": "duplicate"})
    assert rig.applied() == 1
    assert rig.count("zaroz_events_total", "wl-1", "unit.created") == 1
    assert rig.count("zaroz_events_duplicate_total", "wl-1", "webhook") == 1
    assert rig.count("zaroz_webhook_deliveries_total", "accepted") == 1
    assert rig.count("zaroz_webhook_deliveries_total", "duplicate") == 1
    assert rig.count("zaroz_webhook_last_delivery_timestamp_seconds", "wl-1") > 0


@pytest.mark.parametrize(("case", "status", "code"), [
    ("tampered_body", 401, "bad_signature"),
    ("wrong_secret", 401, "bad_signature"),
    ("stale", 401, "stale_timestamp"),
    ("future", 401, "future_timestamp"),
    ("no_v1", 401, "bad_signature"),
    ("bad_hex", 401, "bad_signature"),
    ("bad_t", 401, "bad_signature"),
    ("missing_signature", 401, "missing_signature"),
    ("missing_workload", 400, "missing_workload"),
    ("bad_workload", 400, "missing_workload"),
    ("text_plain", 415, "unsupported_media_type"),
    ("no_content_type", 415, "unsupported_media_type"),
    ("malformed_json", 400, "malformed_json"),
])
async def test_refused(rig: Rig, case: str, status: int, code: str):
    ev = rig.event()
    raw = orjson.dumps(ev)
    good = f"t={NOW},v1={sign(OLD, NOW, raw)}"
    kw: dict[str, Any] = {
        "tampered_body": {"signature": good, "body": raw.replace(b"unit.created", b"unit.ready")},
        "wrong_secret": {"secret": NEW},
        "stale": {"t": NOW - 301},
        "future": {"t": NOW + 301},
        "no_v1": {"signature": f"t={NOW}"},
        "bad_hex": {"signature": f"t={NOW},v1={'zz' * 32}"},
        "bad_t": {"signature": f"t=soon,v1={sign(OLD, NOW, raw)}"},
        "missing_signature": {"drop": ("Zaroz-Signature",)},
        "missing_workload": {"workload": None},
        "bad_workload": {"workload": "has space"},
        "text_plain": {"ctype": "text/plain"},
        "no_content_type": {"drop": ("Content-Type",), "ctype": ""},
        "malformed_json": {"body": b"{not json"},
    }[case]
    body = kw.pop("body", raw)
    got_status, got = await rig.post(body, **kw)
    assert got_status == status, got
    assert got["error"]["code"] == code and got["error"]["message"]
    assert rig.applied() == 0
    assert rig.count("zaroz_webhook_deliveries_total", code) == 1
    assert rig.count("zaroz_webhook_deliveries_total", "accepted") == 0


async def test_timestamp_tolerance_is_inclusive_both_ways(rig: Rig):
    assert (await rig.post(rig.event(), t=NOW - 300))[0] == 200
    assert (await rig.post(rig.event(), t=NOW + 300))[0] == 200


async def test_several_v1_entries_any_match(rig: Rig):
    ev = rig.event()
    raw = orjson.dumps(ev)
    sig = f"t={NOW},v1={sign(NEW, NOW, raw)},v2=whatever,v1={sign(OLD, NOW, raw)}"
    assert await rig.post(raw, signature=sig) == (200, {"result": "accepted"})


async def test_oversized_body_refused_before_reading(rig: Rig):
    big = {**rig.event(), "padding": "x" * 5000}
    status, got = await rig.post(big)
    assert (status, got["error"]["code"]) == (413, "too_large")


async def test_oversized_chunked_body_refused(rig: Rig):
    ev = {**rig.event(), "padding": "x" * 5000}
    raw = orjson.dumps(ev)

    async def chunks():
        for i in range(0, len(raw), 1000):
            yield raw[i:i + 1000]

    headers = {"Content-Type": "application/json", "Zaroz-Workload": "wl-1",
               "Zaroz-Signature": f"t={NOW},v1={sign(OLD, NOW, raw)}"}
    r = await rig.client.post(PATH, data=chunks(), headers=headers)
    assert r.status == 413 and "Content-Length" not in r.request_info.headers
    assert rig.applied() == 0


async def test_secret_rotation_one_file_two_lines(rig: Rig):
    assert (await rig.post(rig.event(), secret=NEW))[0] == 401
    rig.secret_file.write_bytes(OLD + b"\n" + NEW + b"\n")
    assert (await rig.post(rig.event(), secret=OLD))[0] == 200
    assert (await rig.post(rig.event(), secret=NEW))[0] == 200
    assert rig.count("zaroz_webhook_secrets") == 2
    rig.secret_file.write_bytes(NEW + b"\n")
    assert (await rig.post(rig.event(), secret=OLD))[0] == 401
    assert (await rig.post(rig.event(), secret=NEW))[0] == 200
    assert rig.count("zaroz_webhook_deliveries_total", "accepted") == 3
    assert rig.count("zaroz_webhook_deliveries_total", "bad_signature") == 2


async def test_secret_rotation_two_files(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(OLD)
    secrets = SecretFiles([a, b])
    assert secrets.get() == [OLD]  # b not there yet: it contributes nothing
    b.write_bytes(NEW)
    assert secrets.get() == [OLD, NEW]
    os.remove(a)
    assert secrets.get() == [NEW]


async def test_no_readable_secret_is_503(rig: Rig):
    os.remove(rig.secret_file)
    status, got = await rig.post(rig.event())
    assert (status, got["error"]["code"]) == (503, "no_secret")
    rig.secret_file.write_bytes(OLD)
    assert (await rig.post(rig.event()))[0] == 200


async def test_signed_non_envelope_is_acknowledged_and_counted_invalid(rig: Rig):
    assert await rig.post(b"[1, 2]") == (200, {"result": "invalid"})
    assert rig.count("zaroz_events_invalid_total", "wl-1", "schema") == 1


async def test_logs_carry_no_customer_data(rig: Rig, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG)
    ev = rig.event(unit="secret-unit-name", data={"private_name": "customer-thing"})
    ev["unit"]["labels"] = {"team": "customer-label"}
    await rig.post(ev)
    await rig.post(ev, secret=NEW)
    text = " ".join(f"{r.getMessage()} {r.__dict__}" for r in caplog.records)
    assert "dlv_1" in text
    for private in ("secret-unit-name", "customer-thing", "customer-label", OLD.decode()):
        assert private not in text


def test_parse_signature():
    assert parse_signature(f"t=12,v1={'ab' * 32}") == (12, [bytes.fromhex("ab" * 32)])
    assert parse_signature(f" v1={'ab' * 32} , t=1") == (1, [bytes.fromhex("ab" * 32)])
    assert parse_signature("t=1,v1=abcd") is None  # not a SHA-256 digest
    assert parse_signature(f"t=-1,v1={'ab' * 32}") is None
    assert parse_signature("") is None


# The platform's published test vector (platform.md 2b, computed outside the project): the
# signature layout is checked against it, not against the product's own `sign`.
VECTOR_SECRET = b"zaroz-test-secret-1"
VECTOR_T = 1764460800
VECTOR_BODY = b'{"seq":1,"type":"webhook.ping"}'
VECTOR_HEADER = "t=1764460800,v1=65e8c423f027c7c1367755fb6e89744c276fb2eed4089ab9dfc720392b7aa946"


def test_sign_reproduces_the_platforms_test_vector():
    assert f"t={VECTOR_T},v1={sign(VECTOR_SECRET, VECTOR_T, VECTOR_BODY)}" == VECTOR_HEADER


def test_the_simulators_own_signing_reproduces_the_vector_too():
    """zaroz_sim signs as the platform does, written apart from the exporter's `sign`."""
    from zaroz_sim.webhook import sign as platform_sign

    assert platform_sign is not sign
    assert f"t={VECTOR_T},v1={platform_sign(VECTOR_SECRET, VECTOR_T, VECTOR_BODY)}" == \
        VECTOR_HEADER


async def test_a_delivery_signed_as_the_platform_signs_is_accepted(tmp_path: Path):
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(VECTOR_SECRET + b"\n")
    pipeline = Pipeline()
    metrics = WebhookMetrics(pipeline.registry)
    app = web.Application()
    WebhookReceiver(Intake(pipeline, metrics), SecretFiles([secret_file], metrics), metrics,
                    clock=lambda: VECTOR_T).install(app)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        headers = {"Content-Type": "application/json", "Zaroz-Workload": "wl-1",
                   "Zaroz-Signature": VECTOR_HEADER}
        r = await client.post(PATH, data=VECTOR_BODY, headers=headers)
        # The signature is accepted; the vector's body is no full envelope, so it is counted
        # invalid (signed, failing the schema), not refused.
        assert (r.status, await r.json()) == (200, {"result": "invalid"})
        tampered = VECTOR_HEADER[:-1] + ("7" if VECTOR_HEADER[-1] != "7" else "8")
        r = await client.post(PATH, data=VECTOR_BODY, headers={**headers,
                                                                "Zaroz-Signature": tampered})
        assert r.status == 401
    finally:
        await client.close()
