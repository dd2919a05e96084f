"""The platform's webhook sender, simulated: signs and POSTs deliveries of a simulator log to an
exporter (platform.md 2b), with the at-least-once habits of the real one: duplicates, deliveries
out of order, pings carrying the webhook's cursor. For tests, the demo and the benchmark.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import orjson

PATH = "/v1/webhooks/events"


def sign(secret: bytes, t: int, body: bytes) -> str:
    """The platform's v1 signature (platform.md): hex HMAC-SHA256 of `<t>.<raw body>`.

    Written here from the platform's description, not imported from the exporter, so the tests
    that deliver through this sender check the exporter's verification independently.
    """
    return hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()



def ping(seq: int, occurred_at: str = "2030-01-01T00:00:00Z") -> dict[str, Any]:
    """A webhook.ping envelope: `seq` is the last seq the webhook delivered (0 when none)."""
    digest = hashlib.blake2b(f"ping:{seq}:{uuid.uuid4()}".encode(), digest_size=16).hexdigest()
    return {"seq": seq, "id": f"evt_{digest}", "type": "webhook.ping", "contract_version": 1,
            "occurred_at": occurred_at, "service_instance_id": "platform-webhook",
            "unit": None, "data": {}}


def delivery_plan(events: Sequence[dict[str, Any]], *, rng: random.Random, duplicates: float = 0.0,
                  window: int = 1, drop: frozenset[int] = frozenset(),
                  ping_every: int = 0) -> list[dict[str, Any]]:
    """The order a flaky sender would deliver `events` in: shuffled within windows of `window`
    events, each repeated with probability `duplicates` (the copy lands a little later), the seqs
    in `drop` never delivered, and a ping after every `ping_every` events carrying the highest
    seq sent so far (whether or not it was dropped: that is how a ping reveals missed ones)."""
    out: list[dict[str, Any]] = []
    sent_max = 0
    size = max(1, window)
    pings = 0
    for i in range(0, len(events), size):
        chunk = list(events[i:i + size])
        rng.shuffle(chunk)
        batch: list[dict[str, Any]] = []
        for e in chunk:
            sent_max = max(sent_max, e["seq"])
            if e["seq"] in drop:
                continue
            batch.append(e)
            if duplicates and rng.random() < duplicates:
                batch.insert(rng.randint(len(batch), len(batch) + 2), e)
        out.extend(batch)
        if ping_every and (i + len(chunk)) // ping_every > pings:
            pings = (i + len(chunk)) // ping_every
            out.append(ping(sent_max, chunk[-1]["occurred_at"]))
    return out


class WebhookSender:
    """POSTs signed deliveries to `{url}/v1/webhooks/events`."""

    def __init__(self, session: aiohttp.ClientSession, url: str, secret: bytes | str, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.session = session
        self.url = url.rstrip("/") + PATH
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.clock = clock
        self.statuses: Counter[int] = Counter()

    def headers(self, workload: str, body: bytes, *, t: int | None = None,
                secret: bytes | None = None) -> dict[str, str]:
        t = int(self.clock()) if t is None else t
        return {
            "Content-Type": "application/json",
            "Zaroz-Workload": workload,
            "Zaroz-Delivery": f"dlv_{uuid.uuid4().hex}",
            "Zaroz-Signature": f"t={t},v1={sign(secret or self.secret, t, body)}",
        }

    async def send(self, workload: str, envelope: dict[str, Any]) -> int:
        """One delivery; returns the HTTP status."""
        body = orjson.dumps(envelope)
        async with self.session.post(self.url, data=body,
                                     headers=self.headers(workload, body)) as r:
            await r.read()
            self.statuses[r.status] += 1
            return r.status

    async def send_all(self, workload: str, deliveries: Sequence[dict[str, Any]], *,
                       concurrency: int = 1, retries: int = 5) -> Counter[int]:
        """Deliver in order with `concurrency` requests in flight (more reordering), retrying
        non-2xx answers like the platform would; returns the final status of each."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for d in deliveries:
            queue.put_nowait(d)
        final: Counter[int] = Counter()

        async def worker() -> None:
            while not queue.empty():
                d = queue.get_nowait()
                status = 0
                for attempt in range(retries):
                    try:
                        status = await self.send(workload, d)
                    except aiohttp.ClientError:
                        status = 0
                    if 200 <= status < 300:
                        break
                    await asyncio.sleep(0.01 * (attempt + 1))
                final[status] += 1

        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
        return final
