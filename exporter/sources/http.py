"""What the sources' HTTP clients do with an answer that is not the one they asked for.

The events route client (`sources.route`, which the tailer and the webhook intake's backfills go
through) and the Kubernetes client (`sources.kube.api`) fail in the same few ways, so they share
one error hierarchy, one status mapping, one Retry-After parser and one retry policy:

- every error carries `result`, a short bounded label value: the HTTP status (`status_result`:
  expected codes keep their number, any other only its class) or a transport kind;
- `error_for_status` says what a status means for the caller: start over (410), come back later
  (408, 429, 5xx), a person must act (401/403, another 4xx), not there (404);
- `Retry` turns an error into the pause before the next attempt and one rate-limited log line in
  the source's own words and fields; `retry_forever` is the loop around a source's step.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import aiohttp

from exporter.sources.backoff import Backoff
from exporter.sources.complaints import Complaints

# Status codes the servers are expected to answer with keep their number as the result label; any
# other keeps only its class ("4xx", "5xx"), so the label stays bounded whatever a proxy sends.
_KNOWN_STATUS = frozenset({200, 400, 401, 403, 404, 408, 410, 429, 500, 502, 503, 504})


def status_result(status: int) -> str:
    """The `result` label value of an HTTP status."""
    if status in _KNOWN_STATUS:
        return str(status)
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP-date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; a naive parse means no zone was given
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# -- errors ------------------------------------------------------------------------------------


def _http(status: int, message: str) -> str:
    return f"HTTP {status} {message}".rstrip()


class HttpError(Exception):
    """A request (or an open stream) that gave nothing usable; `result` is its label value."""

    result: str = "error"


class Expired(HttpError):
    """410: the position asked from (a cursor, a resourceVersion, a continue token) is gone."""

    result = "410"


class RetryLater(HttpError):
    """408, 429 and 5xx: try again, not before `retry_after` seconds when given."""

    def __init__(self, status: int, retry_after: float | None, message: str = "") -> None:
        super().__init__(_http(status, message) + f", retry after {retry_after}")
        self.status = status
        self.retry_after = retry_after
        self.result = status_result(status)


class Unauthorized(HttpError):
    """401 or 403: credentials missing, wrong, expired, or lacking rights."""

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(_http(status, message))
        self.status = status
        self.result = status_result(status)


class Rejected(HttpError):
    """Another 4xx (400, a 404, ...): the request is wrong; retrying it unchanged will not help
    soon. `code` is the server's machine-readable reason when it gave one."""

    def __init__(self, status: int, message: str = "", code: str = "") -> None:
        super().__init__(f"HTTP {status} {code}: {message}" if code else _http(status, message))
        self.status = status
        self.code = code
        self.message = message
        self.result = status_result(status)


class NotFound(Rejected):
    """404: the server does not serve what was asked (a workload the route does not know, a
    resource whose CRD is not installed). May change on its own: a workload or a CRD may come."""


class CredentialsUnavailable(HttpError):
    """No credentials (a token, a client certificate) could be had; the request was not sent.
    `result` is the source's word for it (`token`, `credentials`)."""

    def __init__(self, message: str, result: str = "credentials") -> None:
        super().__init__(message)
        self.result = result


class TransportError(HttpError):
    """No usable answer: `kind` is timeout, connection, truncated or invalid_body."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.result = kind


# Errors a person has to fix (RBAC, a token, a wrong request, a missing workload or CRD): retried,
# but never fast.
NEEDS_ATTENTION: tuple[type[HttpError], ...] = (Unauthorized, CredentialsUnavailable, Rejected)


def error_for_status(status: int, *, message: str = "", code: str = "",
                     retry_after: float | None = None) -> HttpError:
    """The error for a failed answer (not 200), from what the caller read of its body."""
    if status == 410:
        return Expired(message or "expired")
    if status in (408, 429) or status >= 500:
        return RetryLater(status, retry_after, message)
    if status in (401, 403):
        return Unauthorized(status, message)
    if status == 404:
        return NotFound(status, message, code)
    return Rejected(status, message, code)


def retry_after_header(headers: Mapping[str, str] | None) -> float | None:
    return parse_retry_after(headers.get("Retry-After")) if headers else None


def transport_error(e: BaseException, timeout: float | None = None) -> TransportError:
    """The TransportError for what aiohttp (or a timeout) raised."""
    if isinstance(e, TimeoutError):
        if timeout is not None:
            return TransportError("timeout", f"no complete answer within {timeout:g}s")
        return TransportError("timeout", str(e) or "no answer in time")
    if isinstance(e, aiohttp.ClientPayloadError):
        return TransportError("truncated", str(e))
    return TransportError("connection", f"{e.__class__.__name__}: {e}")


# -- retrying ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wording:
    """What one source's log lines say, for each kind of failure and for the recovery."""

    retry_later: str  # RetryLater
    failed: str  # TransportError and anything else transient
    unauthorized: str
    no_credentials: str
    not_found: str
    rejected: str
    recovered: str

    def attention(self, e: HttpError) -> str:
        if isinstance(e, NotFound):
            return self.not_found
        if isinstance(e, Unauthorized):
            return self.unauthorized
        if isinstance(e, CredentialsUnavailable):
            return self.no_credentials
        return self.rejected


class Retry:
    """One source's answer to a failed request: the pause before the next attempt, and a
    rate-limited log line (`Complaints`) in the source's words with its fields.

    The pause is the backoff's (full jitter, reset on success); a Retry-After is a floor on it;
    errors that need a person wait at least `attention_delay` (retrying them fast only fills the
    logs), except a 404 when `not_found_waits` is False (a CRD installed later is picked up within
    one backoff) and a first 401 when `retry_first_401` (the credentials were reloaded)."""

    def __init__(
        self,
        logger: logging.Logger,
        wording: Wording,
        backoff: Backoff,
        *,
        attention_delay: float,
        log_interval: float,
        not_found_waits: bool = True,
        retry_first_401: bool = False,
        **fields: Any,
    ) -> None:
        self.wording = wording
        self.backoff = backoff
        self.attention_delay = attention_delay
        self.not_found_waits = not_found_waits
        self.retry_first_401 = retry_first_401
        self.complaints = Complaints(logger, wording.recovered, log_interval, **fields)

    @property
    def failing(self) -> bool:
        """A streak of failures is going on (no recovery logged since)."""
        return self.complaints.count > 0

    def failed(self, e: HttpError, **fields: Any) -> float:
        """Counts one more failure; returns the pause before the next attempt."""
        w = self.wording
        if isinstance(e, RetryLater):
            delay = self.backoff.next(retry_after=e.retry_after)
            self.complain(logging.WARNING, e.result, w.retry_later, delay,
                          retry_after=e.retry_after, error=str(e), **fields)
        elif isinstance(e, NEEDS_ATTENTION):
            fresh = (self.retry_first_401 and isinstance(e, Unauthorized) and e.status == 401
                     and not self.complaints.count)
            lenient = fresh or (isinstance(e, NotFound) and not self.not_found_waits)
            delay = self.backoff.next(floor=0.0 if lenient else self.attention_delay)
            self.complain(logging.ERROR, e.result, w.attention(e), delay, error=str(e), **fields)
        else:
            delay = self.backoff.next()
            self.complain(logging.WARNING, e.result, w.failed, delay, error=str(e), **fields)
        return delay

    def complain(self, level: int, result: str, msg: str, delay: float, **fields: Any) -> None:
        """A failure that is not an HttpError (an empty page, a 410 that makes no sense)."""
        self.complaints.failed(level, result, msg, delay, **fields)

    def recovered(self, **fields: Any) -> None:
        """A success: the backoff starts over, and the end of a failing streak is logged."""
        self.backoff.reset()
        self.complaints.recovered(**fields)


async def retry_forever(
    step: Callable[[], Awaitable[float]],
    pause: Callable[[float], Awaitable[Any]],
    backoff: Backoff,
    logger: logging.Logger,
    message: str,
    fields: Callable[[], dict[str, Any]],
) -> NoReturn:
    """Run `step` (which returns the pause before the next one) until cancelled. A bug in a
    step is logged with its traceback and retried after a backoff: it never ends the source."""
    while True:
        try:
            delay = await step()
        except asyncio.CancelledError:
            raise
        except Exception:
            delay = backoff.next()
            logger.exception(message, extra={**fields(), "retry_in": round(delay, 3)})
        if delay > 0:
            await pause(delay)
