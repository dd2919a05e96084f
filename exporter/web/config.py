"""The web configuration file of Prometheus' exporter-toolkit (`--web.config.file`), parsed and
checked.

The same YAML Prometheus exporters read, so an operator's existing file works unchanged:

    tls_server_config:
      cert_file: server.crt          # relative paths are relative to the web config file
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: ca.crt
      min_version: TLS12             # TLS10..TLS13; default TLS12
      max_version: TLS13
    http_server_config:
      headers:
        Strict-Transport-Security: max-age=31536000
    basic_auth_users:
      prometheus: $2y$10$...          # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\\n')

Like exporter-toolkit, unknown keys are errors, TLS is on when cert_file and key_file are set,
and only the security headers the toolkit allows can be set. Differences, each refused with a
clear error rather than silently ignored: Python's ssl module cannot request a client
certificate without verifying it, so `RequestClientCert` and `RequireAnyClientCert` are not
supported; `cipher_suites`, `curve_preferences` and `client_allowed_sans` are not either.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CLIENT_AUTH = {
    "": ssl.CERT_NONE,
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNSUPPORTED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert")
TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# exporter-toolkit allows exactly these response headers to be configured.
ALLOWED_HEADERS = ("Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options",
                   "X-XSS-Protection", "Content-Security-Policy")
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
             "max_version"}
_TLS_UNSUPPORTED = {"cipher_suites", "curve_preferences", "prefer_server_cipher_suites",
                    "client_allowed_sans", "cert", "key", "client_ca"}
_HTTP_KEYS = {"headers", "http2"}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}


class WebConfigError(Exception):
    """The file cannot be used; the message says which key and why."""


@dataclass(frozen=True)
class TLSConfig:
    cert_file: Path
    key_file: Path
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED

    def files(self) -> tuple[Path, ...]:
        return (self.cert_file, self.key_file) + ((self.client_ca_file,)
                                                  if self.client_ca_file else ())

    def context(self) -> ssl.SSLContext:
        """A server context for these settings; raises WebConfigError when a file is unusable."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.apply(ctx)
        return ctx

    def apply(self, ctx: ssl.SSLContext) -> None:
        """Load these settings into `ctx` (new connections take them; open ones keep theirs).
        A verified client certificate is asked for but not required at the TLS level: the HTTP
        layer refuses requests without one, except the health endpoints (kubelet probes cannot
        present one)."""
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file is not None:
                ctx.load_verify_locations(cafile=str(self.client_ca_file))
        except (OSError, ssl.SSLError) as e:
            raise WebConfigError(f"tls_server_config: cannot load {_files(self)}: {e}") from None
        ctx.verify_mode = ssl.CERT_NONE if self.client_auth == ssl.CERT_NONE else ssl.CERT_OPTIONAL
        ctx.minimum_version = self.min_version
        ctx.maximum_version = self.max_version

    @property
    def requires_client_cert(self) -> bool:
        return self.client_auth == ssl.CERT_REQUIRED


def _files(t: TLSConfig) -> str:
    return ", ".join(str(p) for p in t.files())


@dataclass(frozen=True)
class WebConfig:
    path: Path | None = None
    tls: TLSConfig | None = None
    headers: dict[str, str] = field(default_factory=dict)
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash

    def files(self) -> tuple[Path, ...]:
        """Every file whose change reloads this configuration."""
        own = (self.path,) if self.path is not None else ()
        return own + (self.tls.files() if self.tls else ())


PLAIN = WebConfig()


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WebConfigError(f"{where}: must be a mapping")
    return value


def _unknown(d: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(d) - known)
    if extra:
        raise WebConfigError(f"{where}: unknown key {extra[0]!r}")


def _tls(d: dict[str, Any], base: Path) -> TLSConfig | None:
    bad = sorted(set(d) & _TLS_UNSUPPORTED)
    if bad:
        raise WebConfigError(f"tls_server_config.{bad[0]}: not supported by this exporter")
    _unknown(d, _TLS_KEYS, "tls_server_config")
    cert, key = d.get("cert_file") or "", d.get("key_file") or ""
    auth = d.get("client_auth_type") or ""
    if not cert and not key:
        if auth or d.get("client_ca_file"):
            raise WebConfigError("tls_server_config: client_auth_type and client_ca_file need "
                                 "cert_file and key_file")
        return None
    if not cert or not key:
        raise WebConfigError("tls_server_config: cert_file and key_file go together "
                             f"(missing {'cert_file' if not cert else 'key_file'})")
    if auth in UNSUPPORTED_CLIENT_AUTH:
        raise WebConfigError(f"tls_server_config.client_auth_type {auth}: not supported (Python "
                             "cannot ask for a certificate without verifying it); use "
                             "VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"tls_server_config.client_auth_type {auth!r}: unknown (one of "
                             f"{', '.join(k for k in CLIENT_AUTH if k)})")
    ca = d.get("client_ca_file") or None
    if CLIENT_AUTH[auth] != ssl.CERT_NONE and not ca:
        raise WebConfigError(f"tls_server_config: client_auth_type {auth} needs client_ca_file")
    versions = {}
    for k, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = d.get(k) or default
        if v not in TLS_VERSIONS:
            raise WebConfigError(f"tls_server_config.{k} {v!r}: one of {', '.join(TLS_VERSIONS)}")
        versions[k] = TLS_VERSIONS[v]
    if versions["min_version"] > versions["max_version"]:
        raise WebConfigError("tls_server_config: min_version is above max_version")
    return TLSConfig(
        cert_file=base / str(cert), key_file=base / str(key), client_auth=CLIENT_AUTH[auth],
        client_auth_type=auth or "NoClientCert", client_ca_file=base / str(ca) if ca else None,
        min_version=versions["min_version"], max_version=versions["max_version"])


def _headers(d: dict[str, Any]) -> dict[str, str]:
    _unknown(d, _HTTP_KEYS, "http_server_config")
    if d.get("http2") not in (None, True, False):
        raise WebConfigError("http_server_config.http2: must be true or false")
    out = {}
    allowed = {h.lower(): h for h in ALLOWED_HEADERS}
    for name, value in _mapping(d.get("headers"), "http_server_config.headers").items():
        canonical = allowed.get(str(name).lower())
        if canonical is None:
            raise WebConfigError(f"http_server_config.headers: {name!r} cannot be configured "
                                 f"(only {', '.join(ALLOWED_HEADERS)})")
        out[canonical] = str(value)
    return out


def _users(d: dict[str, Any]) -> dict[str, bytes]:
    out = {}
    for user, hashed in d.items():
        h = str(hashed or "").encode()
        if not h.startswith((b"$2a$", b"$2b$", b"$2y$")) or len(h) != 60:
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash ($2y$...)")
        out[str(user)] = h
    return out


def parse(text: str, path: Path | None = None) -> WebConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise WebConfigError(f"not YAML: {' '.join(str(e).split())}") from None
    doc = _mapping(doc, "the file")
    _unknown(doc, _TOP_KEYS, "the file")
    base = path.parent if path is not None else Path(".")
    tls = _tls(_mapping(doc.get("tls_server_config"), "tls_server_config"), base)
    cfg = WebConfig(path=path, tls=tls,
                    headers=_headers(_mapping(doc.get("http_server_config"),
                                              "http_server_config")),
                    users=_users(_mapping(doc.get("basic_auth_users"), "basic_auth_users")))
    if tls is not None:
        tls.context()  # the files must load now: a typo is a start-up error, not a TLS alert
    return cfg


def load(path: str | Path | None) -> WebConfig:
    """The file's configuration; no path: plain HTTP, no auth. Raises WebConfigError."""
    if not path:
        return PLAIN
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise WebConfigError(f"cannot read: {e.strerror or e}") from None
    return parse(text, p)
