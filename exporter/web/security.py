"""A listener's web configuration in force: TLS, client certificates, basic auth, headers.

The web config file and the files it names are re-read when any of them changes (a stat of each
per TLS handshake and per request; no restart needed to rotate a certificate, a client CA or a
password):

- TLS: the listener's SSLContext is created once and its settings (verify mode, versions) updated
  in place, so new connections take them; each handshake is also switched (`sni_callback`, called
  with or without SNI) to a context freshly built from the current files, which is where the
  certificate and the client CA store come from.
- A client certificate, when the file requires one, is verified by TLS but demanded by the HTTP
  layer: every path answers 403 without one except the health endpoints, which kubelet probes
  (HTTPS, no client certificate) must reach. Basic auth exempts them too: they reveal nothing.
- A file that no longer loads is logged and the previous configuration kept; TLS cannot be
  switched on or off without a restart (the listener's socket was made for one or the other).

Passwords are checked with bcrypt (slow on purpose) in a worker thread, and results cached by a
hash of user, password and stored hash, so a scrape every few seconds costs one bcrypt ever.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import os
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path

import bcrypt
from aiohttp import web

from exporter.web import config as webconfig
from exporter.web.config import WebConfig, WebConfigError

log = logging.getLogger(__name__)

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
AUTH_CACHE_SIZE = 1024
# Checked against when the user is unknown, so the answer takes as long as for a known user.
_DUMMY_HASH = bcrypt.hashpw(b"dummy", bcrypt.gensalt(4))
_Key = tuple[tuple[int, int, int, int] | None, ...]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _stat(p: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(p)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


class WebSecurity:
    """One listener's web config (`path`: the exporter-toolkit YAML, or None for plain HTTP)."""

    def __init__(self, path: str | os.PathLike[str] | None, name: str = "metrics") -> None:
        self.path = str(path) if path else None
        self.name = name
        self.config: WebConfig = webconfig.load(self.path)  # raises WebConfigError
        self._key = self._stat_key(self.config)
        self.ssl: ssl.SSLContext | None = None
        self._current: ssl.SSLContext | None = None
        if self.config.tls is not None:
            self.ssl = self.config.tls.context()
            self._current = self.ssl
            self.ssl.sni_callback = self._handshake
        self._auth_cache: OrderedDict[bytes, bool] = OrderedDict()
        self.reloads = 0

    @property
    def scheme(self) -> str:
        return "https" if self.ssl is not None else "http"

    def _stat_key(self, cfg: WebConfig) -> _Key:
        return tuple(_stat(p) for p in cfg.files())

    def refresh(self) -> None:
        """Re-read the configuration when one of its files changed."""
        if self.path is None or self._stat_key(self.config) == self._key:
            return
        try:
            new = webconfig.load(self.path)
            if (new.tls is None) != (self.ssl is None):
                raise WebConfigError("TLS cannot be switched on or off without a restart")
            fresh = None
            if new.tls is not None and self.ssl is not None:
                fresh = new.tls.context()
                new.tls.apply(self.ssl)  # verify mode and versions for new connections
        except WebConfigError as e:
            self._key = self._stat_key(self.config)  # said once per change, not per request
            log.error("web config not reloaded, keeping the previous one",
                      extra={"listener": self.name, "file": self.path, "error": str(e)})
            return
        self.config, self._key = new, self._stat_key(new)
        if fresh is not None:
            self._current = fresh
            fresh.sni_callback = self._handshake
        self._auth_cache.clear()
        self.reloads += 1
        log.info("web config reloaded", extra={"listener": self.name, "file": self.path})

    def _handshake(self, sslobj: ssl.SSLObject, server_name: str | None,
                   ctx: ssl.SSLContext) -> None:
        self.refresh()
        if self._current is not None and sslobj.context is not self._current:
            sslobj.context = self._current

    # -- HTTP ---------------------------------------------------------------------------------

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self._middleware)
        app.on_response_prepare.append(self._headers)

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        for name, value in self.config.headers.items():
            response.headers[name] = value

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.refresh()
        cfg = self.config
        if request.path not in PROBE_PATHS:
            if cfg.tls is not None and cfg.tls.requires_client_cert and not _peer_cert(request):
                return web.Response(status=403, text="a verified client certificate is "
                                    "required\n")
            if cfg.users and not await self._authorized(request, cfg):
                return web.Response(status=401, text="unauthorized\n",
                                    headers={"WWW-Authenticate": 'Basic realm="zaroz-exporter"'})
        return await handler(request)

    async def _authorized(self, request: web.Request, cfg: WebConfig) -> bool:
        creds = _basic(request.headers.get("Authorization", ""))
        if creds is None:
            return False
        login, password = creds
        stored = cfg.users.get(login)
        key = hashlib.sha256(b"\0".join([login.encode(), password, stored or b""])).digest()
        cached = self._auth_cache.get(key)
        if cached is None:
            ok = await asyncio.to_thread(_checkpw, password, stored or _DUMMY_HASH)
            cached = ok and stored is not None
            self._auth_cache[key] = cached
            if len(self._auth_cache) > AUTH_CACHE_SIZE:
                self._auth_cache.popitem(last=False)
        if not cached:
            log.debug("basic auth refused", extra={"listener": self.name,
                                                   "user": login[:64],
                                                   "remote": request.remote})
        return cached


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # bcrypt 5 refuses passwords over 72 bytes
        return False


def _basic(header: str) -> tuple[str, bytes] | None:
    """(user, password) of a `Basic` Authorization header (RFC 7617), None when it is not one."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    return user.decode("utf-8", "replace"), password


def _peer_cert(request: web.Request) -> bool:
    obj = request.transport.get_extra_info("ssl_object") if request.transport else None
    return bool(obj is not None and obj.getpeercert(binary_form=True))
