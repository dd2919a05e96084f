"""The route's bearer token, read from a file and re-read when the file changes.

Kubernetes projected service-account tokens are rotated by writing a new directory and swapping
a symlink, so the file is recognised by (device, inode, mtime_ns, size) of what the path points
to, not by mtime alone. A stat per request is cheap next to an HTTP round trip.

A missing, unreadable or empty file raises `TokenError` and the request is not sent: the file was
configured, so an unauthenticated request is known to be wrong, and sending it would turn a local
configuration error into a misleading 401 from the server. The error is logged once per distinct
problem (and again when it is fixed), not once per request.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import NoReturn

log = logging.getLogger(__name__)

_Key = tuple[int, int, int, int]


class TokenError(Exception):
    """The token file could not give a token."""


def _key(st: os.stat_result) -> _Key:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class TokenFile:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._key: _Key | None = None
        self._token = ""
        self._problem: str | None = None

    def get(self) -> str:
        """The current token; re-reads the file when it changed since the last read."""
        try:
            if self._key is not None and _key(os.stat(self.path)) == self._key:
                return self._token
            with open(self.path, "rb") as f:
                key = _key(os.fstat(f.fileno()))
                raw = f.read()
            token = raw.decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as e:
            self._fail(f"cannot read token file: {e.__class__.__name__}: {e}")
        if not token:
            self._fail("token file is empty")
        self._key = key
        self._token = token
        if self._problem is not None:
            log.info("token file readable again", extra={"token_file": str(self.path)})
            self._problem = None
        return token

    def _fail(self, problem: str) -> NoReturn:
        # The key is dropped so the next call reads the file again whatever its stat says.
        self._key = None
        self._token = ""
        if problem != self._problem:
            log.error(problem, extra={"token_file": str(self.path)})
            self._problem = problem
        raise TokenError(problem)
