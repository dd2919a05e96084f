"""The platform's events route (platform.md 2a): the only module that knows its HTTP shape.

The contract names the route but not its shape, so every detail of the assumed one (paths, query
parameters, bodies, status codes) lives here; following the platform's real route later means
changing this module only. Callers get decoded pages or exceptions that say what to do next, each
with a short bounded `result` label for `zaroz_route_requests_total`.

Events are returned as decoded JSON and not validated: the lifecycle model validates them and
counts the invalid ones, so one bad event never hides the rest of its page.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
from yarl import URL

from exporter.sources.http import (
    CredentialsUnavailable,
    Expired,
    NotFound,
    TransportError,
    error_for_status,
    retry_after_header,
    transport_error,
)
from exporter.sources.token import TokenError, TokenFile


@dataclass(frozen=True)
class WorkloadRef:
    id: str
    slug: str


@dataclass(frozen=True)
class Page:
    events: list[Any]
    head_seq: int
    result: str = "200"


class CursorExpired(Expired):
    """410: events after the cursor are gone; the log now starts at `oldest_seq`."""

    def __init__(self, oldest_seq: int) -> None:
        super().__init__(f"cursor expired, oldest retained seq is {oldest_seq}")
        self.oldest_seq = oldest_seq


def _error_fields(body: Any) -> tuple[str, str]:
    err = body.get("error") if type(body) is dict else None
    if type(err) is dict:
        code, msg = err.get("code"), err.get("message")
        return (code if type(code) is str else "", msg if type(msg) is str else "")
    return ("", "")


@functools.lru_cache(maxsize=64)
def _timeout(total: float) -> aiohttp.ClientTimeout:
    """One ClientTimeout per distinct total (a handful: --wait plus the margin, 0 plus it)."""
    return aiohttp.ClientTimeout(total=total)


class RouteClient:
    """Requests to the events route over a shared aiohttp session.

    The session is the caller's: its connector limit must allow one long poll per tailed workload
    at once (aiohttp's default total limit is 100 connections).
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        token: TokenFile | None = None,
        timeout_margin: float = 10.0,
    ) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_margin = timeout_margin
        self._base = str(URL(self.base_url))  # encoded: events URLs are built already encoded

    async def workloads(self, timeout: float = 30.0) -> list[WorkloadRef]:
        """GET /v1/workloads: every workload the route serves."""
        status, headers, body = await self._get(f"{self.base_url}/v1/workloads", None, timeout)
        if status != 200:
            self._raise_for(status, headers, body)
        items = body.get("workloads") if type(body) is dict else None
        if type(items) is not list:
            raise TransportError("invalid_body", "no workloads list")
        out = []
        for it in items:
            wid = it.get("id") if type(it) is dict else None
            if type(wid) is not str or not wid:
                raise TransportError("invalid_body", "workload without an id")
            slug = it.get("slug")
            out.append(WorkloadRef(wid, slug if type(slug) is str else wid))
        return out

    async def events(self, workload: str, after: int, limit: int, wait: float) -> Page:
        """GET /v1/workloads/{workload}/events: up to `limit` events after seq `after`.

        The server holds the request up to `wait` seconds when nothing is newer than `after`.
        """
        wait_s = math.ceil(wait)  # the route takes whole seconds
        # Built as an encoded URL (its parts are quoted or integers): one request per event at
        # 1,000 workloads, so aiohttp's query encoding of a params dict shows in the profile.
        url = URL(f"{self._base}/v1/workloads/{quote(workload, safe='')}/events"
                  f"?after={int(after)}&limit={int(limit)}&wait={wait_s}", encoded=True)
        status, headers, body = await self._get(url, None, wait_s + self.timeout_margin)
        if status != 200:
            self._raise_for(status, headers, body)
        if type(body) is not dict:
            raise TransportError("invalid_body", "page is not an object")
        events, head = body.get("events"), body.get("head_seq")
        if type(events) is not list or type(head) is not int:
            raise TransportError("invalid_body", "page without events list or integer head_seq")
        return Page(events, head)

    async def _get(
        self, url: str | URL, params: dict[str, str] | None, timeout: float
    ) -> tuple[int, Any, Any]:
        headers = {"Accept": "application/json"}
        if self.token is not None:
            try:
                headers["Authorization"] = "Bearer " + self.token.get()
            except TokenError as e:
                raise CredentialsUnavailable(str(e), result="token") from e
        try:
            async with self.session.get(
                url,
                params=params,
                headers=headers,
                timeout=_timeout(timeout),
                allow_redirects=False,
            ) as resp:
                raw = await resp.read()
                status, resp_headers = resp.status, resp.headers
        except (TimeoutError, aiohttp.ClientError) as e:
            raise transport_error(e, timeout) from e
        try:
            # msgspec, not orjson: a seq or head beyond 64 bits stays an exact integer (orjson
            # reads one as a float), and it decodes a page as fast.
            body = msgspec.json.decode(raw) if raw else None
        except msgspec.DecodeError as e:
            if status == 200:
                raise TransportError("invalid_body", "not JSON") from e
            body = None  # an error page from a proxy: the status says enough
        return status, resp_headers, body

    @staticmethod
    def _raise_for(status: int, headers: Any, body: Any) -> None:
        code, message = _error_fields(body)
        if status == 410:
            oldest = body.get("oldest_seq") if type(body) is dict else None
            if type(oldest) is not int or oldest < 1:
                raise TransportError("invalid_body", "410 without an integer oldest_seq")
            raise CursorExpired(oldest)
        if status == 404:  # the route does not know the workload (yet, or any more)
            raise NotFound(status, message or code or "unknown workload")
        raise error_for_status(status, message=message, code=code or f"http_{status}",
                               retry_after=retry_after_header(headers))
