"""The sources' one HTTP error module: status mapping, Retry-After, and the retry policy's pauses
and log lines (the route and Kubernetes clients and their loops all go through it)."""

from __future__ import annotations

import asyncio
import logging
import random
from email.utils import formatdate

import pytest

from exporter.sources.backoff import Backoff
from exporter.sources.http import (
    NEEDS_ATTENTION,
    CredentialsUnavailable,
    Expired,
    NotFound,
    Rejected,
    Retry,
    RetryLater,
    TransportError,
    Unauthorized,
    Wording,
    error_for_status,
    parse_retry_after,
    retry_after_header,
    retry_forever,
    status_result,
)


def test_parse_retry_after():
    now = 1_700_000_000.0
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == 30.0
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0  # past: at once
    for bad in (None, "", "-1", "soon", "nan", "inf", "Wed, 21 Oct 2015 07:28:00"):  # no zone
        assert parse_retry_after(bad) is None, bad
    assert retry_after_header({"Retry-After": "12"}) == 12.0
    assert retry_after_header({}) is None and retry_after_header(None) is None


def test_status_labels_stay_bounded():
    assert [status_result(s) for s in (200, 410, 429, 418, 599, 302, 999, 42)] == [
        "200", "410", "429", "4xx", "5xx", "3xx", "other", "other"]


@pytest.mark.parametrize(
    ("status", "kind", "result", "attention"),
    [
        (410, Expired, "410", False),
        (408, RetryLater, "408", False),
        (429, RetryLater, "429", False),
        (500, RetryLater, "500", False),
        (503, RetryLater, "503", False),
        (599, RetryLater, "5xx", False),
        (401, Unauthorized, "401", True),
        (403, Unauthorized, "403", True),
        (404, NotFound, "404", True),
        (400, Rejected, "400", True),
        (418, Rejected, "4xx", True),
        (302, Rejected, "3xx", True),  # redirects are not followed: the URL is wrong
    ],
)
def test_each_status_maps_to_what_the_caller_does_next(status, kind, result, attention):
    e = error_for_status(status, message="why", retry_after=5.0)
    assert type(e) is kind and e.result == result
    assert isinstance(e, NEEDS_ATTENTION) is attention
    if kind is RetryLater:
        assert e.retry_after == 5.0 and e.status == status
        assert str(e) == f"HTTP {status} why, retry after 5.0"


def test_errors_say_the_servers_reason():
    assert str(error_for_status(400, message="bad limit", code="invalid_limit")) == (
        "HTTP 400 invalid_limit: bad limit")
    assert str(error_for_status(404, message="no such workload")) == "HTTP 404 no such workload"
    assert str(error_for_status(410)) == "expired"
    assert CredentialsUnavailable("no token", result="token").result == "token"
    assert TransportError("timeout", "10s").result == "timeout"


WORDS = Wording(retry_later="later", failed="failed", unauthorized="refused",
                no_credentials="nothing to send", not_found="unknown", rejected="rejected",
                recovered="recovered")


def retry(**kw) -> Retry:
    # The backoff's jitter is [0, ceiling]: with base == cap == 1 every pause is within [0, 1].
    return Retry(logging.getLogger("test.http"), WORDS, Backoff(1.0, 1.0, rng=random.Random(0)),
                 attention_delay=30.0, log_interval=60.0, **kw)


def test_retry_pauses_by_kind():
    r = retry()
    assert 10.0 <= r.failed(RetryLater(429, 10.0)) <= 11.0  # the server's value is the floor
    assert r.failed(TransportError("connection")) <= 1.0
    assert r.failed(Unauthorized(403)) == 30.0  # a person must act: never fast
    assert r.failed(NotFound(404, "x")) == 30.0
    assert r.failed(CredentialsUnavailable("no token")) == 30.0
    assert r.backoff.failures == 5 and r.failing
    r.recovered()
    assert r.backoff.failures == 0 and not r.failing


def test_retry_leniencies_are_per_source():
    r = retry(not_found_waits=False, retry_first_401=True)
    assert r.failed(NotFound(404)) <= 1.0  # a CRD installed later is seen within a backoff
    assert r.failed(Unauthorized(401)) == 30.0  # not the first failure of the streak
    r.recovered()
    assert r.failed(Unauthorized(401)) <= 1.0  # the first 401: credentials were reloaded
    assert r.failed(Unauthorized(403)) == 30.0


def test_retry_logs_once_per_streak_in_the_sources_words(caplog):
    caplog.set_level(logging.INFO, logger="test.http")
    r = retry(workload="wl-1")
    for _ in range(3):
        r.failed(RetryLater(503, None), cursor=7)
    r.failed(Unauthorized(401, "bad token"), cursor=7)
    r.recovered(cursor=8)
    lines = [(rec.levelname, rec.getMessage(), rec.result if hasattr(rec, "result") else None)
             for rec in caplog.records]
    assert lines == [("WARNING", "later", "503"), ("ERROR", "refused", "401"),
                     ("INFO", "recovered", None)]
    first, refused, done = caplog.records
    assert (first.workload, first.cursor, first.failures) == ("wl-1", 7, 1)
    assert refused.failures == 4 and refused.error == "HTTP 401 bad token"
    assert (done.failures, done.last_result, done.cursor) == (4, "401", 8)


async def test_retry_forever_survives_a_bug_and_ends_only_when_cancelled(caplog):
    caplog.set_level(logging.ERROR, logger="test.http")
    pauses: list[float] = []
    steps = iter([0.5, "bug", 0.0, 2.0])

    async def step() -> float:
        got = next(steps)
        if got == "bug":
            raise KeyError("a bug")
        return got  # type: ignore[return-value]

    async def pause(delay: float) -> None:
        pauses.append(delay)
        if len(pauses) == 3:
            raise asyncio.CancelledError

    backoff = Backoff(1.0, 1.0, rng=random.Random(0))
    with pytest.raises(asyncio.CancelledError):
        await retry_forever(step, pause, backoff, logging.getLogger("test.http"), "step failed",
                            lambda: {"scope": "*"})
    # 0.5, then the bug's backoff, no pause after 0.0, then 2.0 (cancelled)
    assert pauses[0] == 0.5 and 0 < pauses[1] <= 1.0 and pauses[2] == 2.0
    [rec] = caplog.records
    assert rec.getMessage() == "step failed" and rec.scope == "*" and rec.exc_info is not None
    assert rec.retry_in == round(pauses[1], 3)
