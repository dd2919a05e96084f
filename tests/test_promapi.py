"""The shared Prometheus API helpers' waits: they retry what a server not up yet raises, and
fail with what they waited for, the last error and the `why` when the time is up."""

from __future__ import annotations

import pytest

from tests.promapi import wait, wait_async


async def test_wait_async_retries_errors_until_the_condition_holds():
    calls = []

    async def cond() -> bool:
        calls.append(1)
        if len(calls) < 3:
            raise KeyError("data")  # a body without the expected field yet
        return True

    await wait_async("three calls", cond, 10)
    assert len(calls) == 3


async def test_wait_async_fails_with_the_last_error_and_why():
    async def cond() -> bool:
        raise ConnectionRefusedError("not up")

    async def why() -> str:
        return "the server's log"

    with pytest.raises(pytest.fail.Exception,
                       match=r"waiting for the server \(last error: not up\): the server's log"):
        await wait_async("the server", cond, 1.2, why)


def test_wait_fails_as_wait_async_does():
    with pytest.raises(pytest.fail.Exception, match=r"waiting for nothing \(last error: None\)"):
        wait("nothing", lambda: False, 0.6)
