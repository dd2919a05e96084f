"""Where the Kubernetes API is and how to authenticate, for an aiohttp client.

The official `kubernetes` package is used for configuration and credentials only: it already
knows every kubeconfig quirk (merged KUBECONFIG paths, `*-data` fields, exec plugins, relative
paths) and the in-cluster layout. Its API client and watch helpers are not used (see
`reflector`). What comes out is a `KubeAccess`: base URL, an `ssl.SSLContext`, request options,
and an `Auth` that gives the current headers.

Credentials go stale, so `Auth.headers()` is asked before every request:

- token files (in-cluster service account, kubeconfig `tokenFile`, `--kube-token-file`) are read
  through `TokenFile`, which re-reads the file when it changes (projected tokens rotate);
- other kubeconfig users go through the package's `refresh_api_key_hook`, which re-runs an exec
  plugin when its credential expires; a 401 calls `Auth.invalidate()`, which reloads the whole
  kubeconfig (re-running the plugin) before the next request, as kubectl does.

Loading a kubeconfig or running an exec plugin blocks, so it happens in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger

from exporter.sources.token import TokenError, TokenFile

log = logging.getLogger(__name__)

DEFAULT_KUBECONFIG = "~/.kube/config"


class KubeConfigError(Exception):
    """No usable API access could be configured (a setup problem: not retried)."""


class CredentialsError(Exception):
    """No credentials to send right now; the request must not be sent unauthenticated."""


class Auth(Protocol):
    async def headers(self) -> dict[str, str]:
        """Headers for the next request; raises CredentialsError when none can be had."""
        ...

    def invalidate(self) -> None:
        """The server refused the credentials (401): get fresh ones before the next request."""
        ...


class NoAuth:
    """No credentials (an emulator, or a kubeconfig user authenticated by client cert only)."""

    async def headers(self) -> dict[str, str]:
        return {}

    def invalidate(self) -> None:
        pass


class TokenFileAuth:
    """A bearer token read from a file, re-read whenever the file changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.token = TokenFile(path)

    async def headers(self) -> dict[str, str]:
        try:
            return {"Authorization": "Bearer " + self.token.get()}
        except TokenError as e:
            raise CredentialsError(str(e)) from e

    def invalidate(self) -> None:
        # The file is the only source: it is re-read when it changes, and a refused token in an
        # unchanged file stays refused until whoever owns the file rotates it.
        pass


class KubeconfigAuth:
    """Credentials of a kubeconfig user (token, basic auth, exec plugin, auth provider).

    `load` builds a fresh `Configuration`; the package's refresh hook re-runs an exec plugin once
    its credential expires. `invalidate()` makes the next request reload everything, at most
    once per `min_reload` seconds so a server refusing every token does not run the plugin in a
    tight loop. A reload that yields new client certificates updates `ssl_context` in place: new
    connections present them.
    """

    def __init__(
        self,
        load: Callable[[], Configuration],
        configuration: Configuration,
        ssl_context: ssl.SSLContext | None = None,
        *,
        min_reload: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self.configuration = configuration
        self.ssl_context = ssl_context
        self.min_reload = min_reload
        self.clock = clock
        self._stale = False
        self._last_reload = clock()
        self._cert = (configuration.cert_file, configuration.key_file)
        self._lock = asyncio.Lock()
        self._thread_lock = threading.Lock()  # the package's loaders are not thread-safe

    async def headers(self) -> dict[str, str]:
        async with self._lock:
            value = await asyncio.to_thread(self._current)
        return {"Authorization": value} if value else {}

    def invalidate(self) -> None:
        self._stale = True

    def _current(self) -> str | None:
        with self._thread_lock:
            if self._stale and self.clock() - self._last_reload >= self.min_reload:
                self._reload()
            try:
                # Runs `refresh_api_key_hook` (re-running an expired exec plugin) first.
                return self.configuration.get_api_key_with_prefix(
                    "BearerToken", alias="authorization")
            except Exception as e:  # an exec plugin or auth provider failing inside the hook
                raise CredentialsError(f"refreshing credentials failed: {e}") from e

    def _reload(self) -> None:
        self._last_reload = self.clock()
        try:
            cfg = self._load()
        except (ConfigException, KubeConfigError, OSError, ValueError) as e:
            log.error("reloading kubeconfig credentials failed, keeping the old ones",
                      extra={"error": str(e)})
            return
        self._stale = False
        self.configuration = cfg
        cert = (cfg.cert_file, cfg.key_file)
        if cert != self._cert and self.ssl_context is not None and cert[0] and cert[1]:
            self.ssl_context.load_cert_chain(cert[0], cert[1])
        self._cert = cert


@dataclass
class KubeAccess:
    """Everything an aiohttp client needs to talk to the API server."""

    base_url: str
    auth: Auth = field(default_factory=NoAuth)
    ssl_context: ssl.SSLContext | None = None  # None: plain HTTP, or aiohttp's default for https
    server_hostname: str | None = None  # kubeconfig `tls-server-name`
    proxy: str | None = None  # kubeconfig `proxy-url` (HTTP proxies only)
    source: str = ""  # where the settings came from, for logs

    def request_options(self) -> dict[str, Any]:
        """Keyword arguments for `aiohttp.ClientSession.request` beyond URL and headers."""
        opts: dict[str, Any] = {}
        if self.ssl_context is not None:
            opts["ssl"] = self.ssl_context
        if self.server_hostname:
            opts["server_hostname"] = self.server_hostname
        if self.proxy:
            opts["proxy"] = self.proxy
        return opts


def make_ssl_context(
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client context trusting `ca_file` only (system CAs when None), with a client cert."""
    ctx = ssl.create_default_context(cafile=ca_file or None)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file or None)
    return ctx


def _ssl_for(cfg: Configuration) -> ssl.SSLContext | None:
    if not cfg.host.startswith("https:"):
        return None
    try:
        return make_ssl_context(cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, cfg.verify_ssl)
    except (OSError, ssl.SSLError) as e:
        raise KubeConfigError(f"TLS settings unusable: {e}") from e


def from_url(
    url: str,
    token_file: str | os.PathLike[str] | None = None,
    *,
    ca_file: str | None = None,
    insecure: bool = False,
) -> KubeAccess:
    """A plain API URL and an optional bearer token file (tests, emulators, kubectl proxy)."""
    if not url.startswith(("http://", "https://")):
        raise KubeConfigError(f"API URL must start with http:// or https://: {url!r}")
    ctx = make_ssl_context(ca_file, verify=not insecure) if url.startswith("https:") else None
    auth: Auth = TokenFileAuth(token_file) if token_file else NoAuth()
    return KubeAccess(url.rstrip("/"), auth, ctx, source="url")


def from_incluster(
    *,
    token_file: str = SERVICE_TOKEN_FILENAME,
    ca_file: str = SERVICE_CERT_FILENAME,
    environ: Mapping[str, str] = os.environ,
) -> KubeAccess:
    """The pod's service account; the token file is re-read when the kubelet rotates it."""
    loader = InClusterConfigLoader(token_file, ca_file, try_refresh_token=False, environ=environ)
    cfg = Configuration()
    try:
        loader.load_and_set(cfg)
    except (ConfigException, OSError) as e:
        raise KubeConfigError(f"in-cluster configuration: {e}") from e
    return KubeAccess(cfg.host, TokenFileAuth(token_file), _ssl_for(cfg), source="in-cluster")


def _kubeconfig_paths(path: str | None, environ: Mapping[str, str]) -> str:
    return path or environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def _load_kubeconfig(paths: str, context: str | None) -> tuple[Configuration, KubeConfigLoader]:
    merger = KubeConfigMerger(paths)
    if merger.config is None:
        raise KubeConfigError(f"no kubeconfig found at {paths}")
    loader = KubeConfigLoader(config_dict=merger.config, active_context=context,
                              config_base_path=None)
    cfg = Configuration()
    loader.load_and_set(cfg)
    return cfg, loader


def _user_of(paths: str, loader: KubeConfigLoader) -> tuple[dict[str, Any], str]:
    """The active context's user entry and the file that defined it."""
    name = (loader.current_context.get("context") or {}).get("user")
    for node in KubeConfigMerger(paths).config.value.get("users") or []:
        value = getattr(node, "value", node)
        if value.get("name") == name:
            return value.get("user") or {}, getattr(node, "path", None) or "."
    return {}, "."


def _token_file(user: dict[str, Any], defined_in: str) -> str | None:
    """The user's `tokenFile` when it is the credential in use (no token, plugin or provider)."""
    tf = user.get("tokenFile")
    if not tf or user.get("token") or "exec" in user or "auth-provider" in user:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(defined_in)), os.path.expanduser(tf))


def from_kubeconfig(
    path: str | None = None,
    context: str | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    min_reload: float = 10.0,
) -> KubeAccess:
    """A kubeconfig (or the KUBECONFIG list, or ~/.kube/config) and one of its contexts.

    The kubeconfig is never written back (auth providers that refresh tokens keep them in memory).
    """
    paths = _kubeconfig_paths(path, environ)
    try:
        cfg, loader = _load_kubeconfig(paths, context)
        name = loader.current_context.get("name", "")
        user, defined_in = _user_of(paths, loader)
    except (ConfigException, OSError, ValueError) as e:
        raise KubeConfigError(f"kubeconfig {paths}: {e}") from e
    ctx = _ssl_for(cfg)
    token_file = _token_file(user, defined_in)
    auth: Auth
    if token_file:
        auth = TokenFileAuth(token_file)
    elif "exec" in user or "BearerToken" in cfg.api_key:
        if "BearerToken" not in cfg.api_key and not cfg.cert_file:
            raise KubeConfigError(f"kubeconfig {paths}: the exec plugin of context {name!r} "
                                  "gave no credentials (its error is logged above)")

        def load() -> Configuration:
            return _load_kubeconfig(paths, context)[0]

        auth = KubeconfigAuth(load, cfg, ctx, min_reload=min_reload)
    else:
        auth = NoAuth()
    server_name = getattr(cfg, "tls_server_name", None) or None
    return KubeAccess(cfg.host, auth, ctx, server_name, cfg.proxy or None,
                      source=f"kubeconfig context {name}")


def load_access(
    *,
    api_url: str | None = None,
    token_file: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> KubeAccess:
    """The flags' choice: `--kube-api-url` (with `--kube-token-file`); else `--kubeconfig` /
    `--kube-context` when given; else the service account inside a pod; else KUBECONFIG or
    ~/.kube/config."""
    if api_url:
        return from_url(api_url, token_file)
    if token_file:
        raise KubeConfigError("--kube-token-file needs --kube-api-url")
    if kubeconfig or context or environ.get("KUBECONFIG"):
        return from_kubeconfig(kubeconfig, context, environ=environ)
    if environ.get(SERVICE_HOST_ENV_NAME):
        return from_incluster(environ=environ)
    return from_kubeconfig(None, None, environ=environ)
