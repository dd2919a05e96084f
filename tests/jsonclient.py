"""A thin JSON client for the emulators' tests: (status, decoded body, headers) per GET."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson


class JsonClient:
    """GETs with default headers. Give it a session with a fresh connection per request
    (`force_close`), so a dropped connection is never silently retried."""

    def __init__(self, base: str, session: aiohttp.ClientSession,
                 headers: dict[str, str]) -> None:
        self.base, self.session, self.headers = base, session, headers

    async def get(
        self, path: str, headers: dict[str, str] | None = None, **params: Any
    ) -> tuple[int, Any, Any]:
        query = {k: str(v) for k, v in params.items()}
        async with self.session.get(self.base + path, params=query,
                                    headers=headers or self.headers) as r:  # fmt: skip
            return r.status, orjson.loads(await r.read()), r.headers
