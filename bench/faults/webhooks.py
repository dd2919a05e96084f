"""The platform's webhook sender under the schedule: every released event delivered to the
shard that owns its workload (now and then to another, which acknowledges and ignores it),
retried until a 2xx; while the schedule says so, deliveries reordered, sent twice (a retry
whose first answer was lost), old ones replayed, and the signing secret rotated (the new one
added to the exporters' secret file, used, then the old one removed). A range lost for good
(platform.holes) is never delivered."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

from bench.faults.fleet import Fleet
from bench.faults.platform import Logs, Release
from exporter.model.sharding import shard_of
from zaroz_sim.webhook import PATH, WebhookSender, delivery_plan


class Pusher:
    def __init__(self, fleet: Fleet, logs: Logs, release: Release, secret_file: Path,
                 seed: int) -> None:
        self.fleet, self.logs, self.release = fleet, logs, release
        self.secret_file = secret_file
        self.rng = random.Random(seed ^ 0x3EB)
        self.secret = secrets.token_hex(16)
        secret_file.write_text(self.secret + "\n", encoding="utf-8")
        self.sent = dict.fromkeys(logs, 0)
        self.until: dict[str, float] = {}  # mode (reorder, retry, replay) -> end of its window
        self.answers: Counter[str] = Counter()
        self.acked = 0
        self.rotations = 0

    def switch_on(self, mode: str, seconds: float) -> None:
        self.until[mode] = max(self.until.get(mode, 0.0), time.monotonic() + seconds)

    def heal(self) -> None:
        self.until.clear()

    def _on(self, mode: str) -> bool:
        return self.until.get(mode, 0.0) > time.monotonic()

    async def rotate(self, overlap_s: float) -> None:
        """A new secret beside the old; signed with it once the exporters had time to re-read
        the file; then the old one removed."""
        new = secrets.token_hex(16)
        self.secret_file.write_text(f"{self.secret}\n{new}\n", encoding="utf-8")
        await asyncio.sleep(max(1.5, overlap_s))
        self.secret = new
        await asyncio.sleep(1.5)
        self.secret_file.write_text(new + "\n", encoding="utf-8")
        self.rotations += 1

    async def run(self) -> None:
        async with aiohttp.ClientSession() as session:
            while True:
                for w in self.logs:
                    await self._push(session, w)
                await asyncio.sleep(0.2)

    async def _push(self, session: aiohttp.ClientSession, w: str) -> None:
        upto = self.release.fed[w]
        start = self.sent[w]
        if self._on("replay") and start > 0:
            start = max(0, start - self.rng.randint(1, 50))
        gone = self.release.gone.get(w, ())  # a lost range: the platform has it no more
        batch = [e for e in self.logs[w][start:upto] if e["seq"] not in gone]
        if not batch:
            return
        plan = delivery_plan(batch, rng=self.rng, duplicates=0.2 if self._on("retry") else 0.0,
                             window=8 if self._on("reorder") else 1, ping_every=25)
        for env in plan:
            await self._deliver(session, w, env)
        self.sent[w] = max(self.sent[w], upto)

    async def _deliver(self, session: aiohttp.ClientSession, w: str, env: dict[str, object],
                       attempts: int = 4) -> None:
        body = orjson.dumps(env)
        for attempt in range(attempts):
            slots = self.fleet.active()
            owner = slots[shard_of(w, self.fleet.shards)]
            slot = owner if self.rng.random() < 0.9 else self.rng.choice(slots)
            sender = WebhookSender(session, slot.url, self.secret)
            try:
                async with session.post(slot.url + PATH, data=body,
                                        headers=sender.headers(w, body),
                                        timeout=aiohttp.ClientTimeout(total=5)) as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            self.answers[str(status)] += 1
            if 200 <= status < 300:
                self.acked += 1
                return
            await asyncio.sleep(0.05 * (attempt + 1))
        # Given up: the platform redelivers later, and the route has the event meanwhile.
