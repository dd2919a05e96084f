"""The webhook receiver, `POST /v1/webhooks/events` (platform.md 2b).

Every check that needs no body comes first (size, media type, headers, timestamp), so a refused
delivery costs no read of its body and no HMAC. Only then is the body read (never past the
limit), its signature checked in constant time, and only a signed body is parsed.

Secrets: every non-empty line of every `--webhook-secret-file` is accepted. Rotating is then
"add the new secret, let the platform switch, remove the old one" with either two files (two keys
of a Kubernetes Secret mounted side by side, the usual way) or two lines of one file; a file that
disappears in between (the old key removed) just stops contributing. Files are re-read when they
change, so a rotation needs no restart.

Answers: 2xx for accepted deliveries and for duplicates (a redelivery of something applied must
stop the platform redelivering), `{"error": {"code", "message"}}` with a 4xx otherwise, 503 when
no secret can be read (the platform retries later; the delivery is not lost). With a
checkpoint (`durability`), a delivery the exporter keeps is answered 2xx only once a checkpoint
that covers it is durable, since the platform never redelivers what it got a 2xx for; 503 when
that checkpoint failed (the platform redelivers). Without one nothing is durable: the 2xx goes
as soon as the event is applied, and a restart loses it. Every result is counted without a
workload label: a refused delivery's headers cannot be trusted. Logs carry the delivery id,
workload, seq and type, never the event's unit or data.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import orjson
from aiohttp import web

from exporter.sources.intake import Intake
from exporter.sources.ports import Durability, WebhookRecorder

log = logging.getLogger(__name__)

PATH = "/v1/webhooks/events"
MIB = 1 << 20
_T = re.compile(r"[0-9]{1,12}")
_WORKLOAD = re.compile(r"[\x21-\x7e]{1,253}")  # printable ASCII, no spaces: safe in labels/logs
_DELIVERY = re.compile(r"[\x21-\x7e]{1,128}")
_Key = tuple[int, int, int, int]

_STATUS = {
    "missing_signature": (401, "Zaroz-Signature header is missing"),
    "bad_signature": (401, "signature does not match any accepted secret"),
    "stale_timestamp": (401, "signature timestamp is too old"),
    "future_timestamp": (401, "signature timestamp is too far in the future"),
    "no_secret": (503, "no webhook secret is configured or readable"),
    "too_large": (413, "body is larger than the limit"),
    "unsupported_media_type": (415, "Content-Type must be application/json"),
    "malformed_json": (400, "body is not JSON"),
    "missing_workload": (400, "Zaroz-Workload header is missing or invalid"),
    "cross_workload": (409, "event id was already applied under another workload"),
    "checkpoint_failed": (503, "the checkpoint that would hold this event could not be saved"),
}
_RETRY_AFTER = {"no_secret": "60", "checkpoint_failed": "5"}  # seconds, with each 503


class SecretFiles:
    """Accepted webhook secrets, from files re-read when they change (stat per call)."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]],
                 metrics: WebhookRecorder | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.metrics = metrics
        self._cache: dict[Path, tuple[_Key, list[bytes]]] = {}
        self._problems: dict[Path, str] = {}
        self._count = -1

    def get(self) -> list[bytes]:
        out: list[bytes] = []
        for p in self.paths:
            out.extend(self._read(p))
        secrets = list(dict.fromkeys(out))
        if len(secrets) != self._count:
            self._count = len(secrets)
            if self.metrics is not None:
                self.metrics.secrets(len(secrets))
            log.info("webhook secrets loaded", extra={"secrets": len(secrets)})
        return secrets

    def _read(self, path: Path) -> list[bytes]:
        try:
            st = os.stat(path)
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._cache.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            self._cache.pop(path, None)
            self._problem(path, f"cannot read webhook secret file: {e.__class__.__name__}")
            return []
        lines = [ln.strip() for ln in raw.splitlines()]
        secrets = [ln for ln in lines if ln]
        self._cache[path] = (key, secrets)
        if not secrets:
            self._problem(path, "webhook secret file is empty")
        elif self._problems.pop(path, None) is not None:
            log.info("webhook secret file readable again", extra={"secret_file": str(path)})
        return secrets

    def _problem(self, path: Path, problem: str) -> None:
        if self._problems.get(path) != problem:
            self._problems[path] = problem
            log.warning(problem, extra={"secret_file": str(path)})


def parse_signature(header: str) -> tuple[int, list[bytes]] | None:
    """`t=<unix>,v1=<hex>[,v1=<hex>...]` as (t, digests); None when it has no t or no v1.

    Unknown schemes (a future v2) are skipped, so the platform can add one during a migration.
    """
    t: int | None = None
    sigs: list[bytes] = []
    for part in header.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            continue
        if k == "t":
            if not _T.fullmatch(v):
                return None
            t = int(v)
        elif k == "v1" and len(v) == 64:
            try:
                sigs.append(bytes.fromhex(v))
            except ValueError:
                continue
    if t is None or not sigs:
        return None
    return t, sigs


def sign(secret: bytes, t: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `<t>.<body>`: what the platform puts in v1."""
    return hmac.new(secret, b"%d." % t + body, hashlib.sha256).hexdigest()


def verify(secrets: Sequence[bytes], t: int, body: bytes, sigs: Sequence[bytes]) -> bool:
    """True when any v1 digest matches any secret; each comparison takes constant time."""
    msg = b"%d." % t + body
    ok = False
    for secret in secrets:
        mac = hmac.new(secret, msg, hashlib.sha256).digest()
        for s in sigs:
            ok |= hmac.compare_digest(mac, s)
    return ok


class WebhookReceiver:
    def __init__(
        self,
        intake: Intake,
        secrets: SecretFiles,
        metrics: WebhookRecorder,
        *,
        tolerance_s: float = 300,
        max_body: int = MIB,
        clock: Callable[[], float] = time.time,
        log_interval: float = 10.0,
        durability: Durability | None = None,
    ) -> None:
        """`durability`: the checkpoint a kept delivery waits for before its 2xx (None: no
        --state-dir, nothing to wait for)."""
        self.intake = intake
        self.durability = durability
        self.secrets = secrets
        self.metrics = metrics
        self.tolerance_s = tolerance_s
        self.max_body = max_body
        self.clock = clock
        self.log_interval = log_interval
        self._logged: dict[str, float] = {}

    def install(self, app: web.Application) -> WebhookReceiver:
        """Adds `POST /v1/webhooks/events` to `app`."""
        app.router.add_post(PATH, self.handle)
        return self

    async def handle(self, request: web.Request) -> web.Response:
        h = request.headers
        size = request.content_length
        if size is not None and size > self.max_body:
            return self._refuse("too_large", request)
        if request.content_type != "application/json":
            return self._refuse("unsupported_media_type", request)
        workload = h.get("Zaroz-Workload", "")
        if not _WORKLOAD.fullmatch(workload):
            return self._refuse("missing_workload", request)
        header = h.get("Zaroz-Signature")
        if not header:
            return self._refuse("missing_signature", request)
        parsed = parse_signature(header)
        if parsed is None:
            return self._refuse("bad_signature", request)
        t, sigs = parsed
        age = self.clock() - t
        if age > self.tolerance_s:
            return self._refuse("stale_timestamp", request)
        if age < -self.tolerance_s:
            return self._refuse("future_timestamp", request)
        body = await self._read(request)
        if body is None:
            return self._refuse("too_large", request)
        secrets = self.secrets.get()
        if not secrets:
            return self._refuse("no_secret", request)
        if not verify(secrets, t, body, sigs):
            return self._refuse("bad_signature", request)
        try:
            obj = msgspec.json.decode(body)  # a seq beyond 64 bits exactly (orjson: a float)
        except msgspec.DecodeError:
            return self._refuse("malformed_json", request)
        result = self.intake.deliver(workload, obj)
        if result in _STATUS:
            return self._refuse(result, request)
        # No await between applying and `covered`: the save it waits for is taken after this.
        if self.durability is not None and result != "ignored" and \
                not await self.durability.covered():
            return self._refuse("checkpoint_failed", request)
        self.metrics.delivery(result)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("webhook delivery", extra={
                "delivery": _delivery_id(request), "workload": workload, "result": result,
                **_event_fields(obj)})
        return web.Response(body=b'{"result":"%s"}' % result.encode(),
                            content_type="application/json")

    async def _read(self, request: web.Request) -> bytes | None:
        """The body, or None as soon as it exceeds the limit (it is not read further)."""
        limit = self.max_body
        buf = bytearray()
        content = request.content
        while True:
            chunk = await content.readany()
            if not chunk:
                return bytes(buf)
            buf += chunk
            if len(buf) > limit:
                return None

    def _refuse(self, result: str, request: web.Request) -> web.Response:
        self.metrics.delivery(result)
        status, message = _STATUS[result]
        now = time.monotonic()
        if now - self._logged.get(result, -1e18) >= self.log_interval:
            self._logged[result] = now
            log.warning("webhook delivery refused", extra={
                "result": result, "status": status, "delivery": _delivery_id(request)})
        resp = web.Response(
            status=status, content_type="application/json",
            body=orjson.dumps({"error": {"code": result, "message": message}}))
        if result in _RETRY_AFTER:
            resp.headers["Retry-After"] = _RETRY_AFTER[result]
        return resp


def _delivery_id(request: web.Request) -> str:
    d = request.headers.get("Zaroz-Delivery", "")
    return d if _DELIVERY.fullmatch(d) else "-"


def _event_fields(obj: Any) -> dict[str, Any]:
    """Envelope fields safe to log: seq and type, never unit or data (customer data)."""
    if type(obj) is not dict:
        return {}
    t = obj.get("type")
    return {"seq": obj.get("seq"), "type": t if type(t) is str and len(t) <= 64 else "?"}
