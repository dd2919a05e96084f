"""The exporter-toolkit web config on the real `serve`: TLS, basic auth, client certificates,
headers, probes left reachable, and files re-read on change."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import bcrypt
import pytest

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.errors import ConfigError
from exporter.commands.serve import start
from exporter.web.config import WebConfigError, parse
from tests.certs import CA

ROOT = Path(__file__).resolve().parent.parent


def _hash(pw: str) -> str:
    return bcrypt.hashpw(pw.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca, other = CA.make("ca"), CA.make("other")
    p = {"ca": ca.write(tmp_path / "ca.pem"), "other_ca": other.write(tmp_path / "other.pem"),
         "crt": tmp_path / "server.crt", "key": tmp_path / "server.key",
         "client_crt": tmp_path / "client.crt", "client_key": tmp_path / "client.key",
         "rogue_crt": tmp_path / "rogue.crt", "rogue_key": tmp_path / "rogue.key",
         "secret": tmp_path / "secret", "dir": tmp_path}
    ca.issue("server", p["crt"], p["key"])
    ca.issue("prometheus", p["client_crt"], p["client_key"], client=True)
    other.issue("rogue", p["rogue_crt"], p["rogue_key"], client=True)
    p["secret"].write_text("s\n")
    p["clients"] = tmp_path / "clients.pem"  # the client CA file the web config names
    p["clients"].write_bytes(p["ca"].read_bytes())
    p["_ca"], p["_other"] = ca, other  # type: ignore[assignment]
    return p


def _write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


async def _serve(pki: dict[str, Path], web_config: Path):
    args = build_parser().parse_args([
        "serve", "--listen", "127.0.0.1:0", "--kube", "off", "--webhook-secret-file",
        str(pki["secret"]), "--web.config.file", str(web_config)])
    return await start(ServeConfig.from_args(args))


def _client_ctx(pki: dict[str, Path], ca: str = "ca", cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki[ca]))
    if cert:
        ctx.load_cert_chain(pki[f"{cert}_crt"], pki[f"{cert}_key"])
    return ctx


async def _get(url: str, ctx: ssl.SSLContext | None, auth: tuple[str, str] | None = None,
               ) -> tuple[int, dict[str, str]]:
    headers = {"Authorization": "Basic " + base64.b64encode(":".join(auth).encode()).decode()
               } if auth else {}
    async with aiohttp.ClientSession() as s, s.get(url, ssl=ctx, headers=headers) as r:
        await r.read()
        return r.status, dict(r.headers)


async def test_tls_with_basic_auth_and_headers(pki):
    cfg = _write_config(pki["dir"] / "web.yml", f"""
tls_server_config: {{cert_file: server.crt, key_file: server.key}}
http_server_config:
  headers: {{Strict-Transport-Security: max-age=31536000}}
basic_auth_users: {{prometheus: '{_hash("right")}'}}
""")
    running = await _serve(pki, cfg)
    try:
        assert running.url.startswith("https://")
        ctx = _client_ctx(pki)
        status, headers = await _get(f"{running.url}/metrics", ctx, ("prometheus", "right"))
        assert status == 200 and headers["Strict-Transport-Security"] == "max-age=31536000"
        assert (await _get(f"{running.url}/metrics", ctx, ("prometheus", "wrong")))[0] == 401
        assert (await _get(f"{running.url}/metrics", ctx, ("nobody", "right")))[0] == 401
        status, headers = await _get(f"{running.url}/metrics", ctx)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert (await _get(f"{running.url}/", ctx))[0] == 401
        for probe in ("/healthz", "/readyz"):  # kubelet: HTTPS, no credentials
            assert (await _get(f"{running.url}{probe}", ctx))[0] == 200
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await _get(f"{running.url}/metrics", _client_ctx(pki, "other_ca"))
        plain = running.url.replace("https://", "http://")
        with pytest.raises(aiohttp.ClientError):
            await _get(f"{plain}/metrics", None, ("prometheus", "right"))
    finally:
        await running.stop()


async def test_mtls_requires_a_verified_client_certificate_except_for_probes(pki):
    cfg = _write_config(pki["dir"] / "web.yml", """
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: ca.pem
  min_version: TLS13
""")
    running = await _serve(pki, cfg)
    try:
        url = f"{running.url}/metrics"
        assert (await _get(url, _client_ctx(pki, cert="client")))[0] == 200
        assert (await _get(url, _client_ctx(pki)))[0] == 403
        assert (await _get(f"{running.url}/healthz", _client_ctx(pki)))[0] == 200
        with pytest.raises(aiohttp.ClientError):  # a certificate of another CA: handshake fails
            await _get(url, _client_ctx(pki, cert="rogue"))
        old = _client_ctx(pki, cert="client")
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(aiohttp.ClientError):  # min_version TLS13
            await _get(url, old)
    finally:
        await running.stop()


def _served_serial(url: str, ca: Path) -> int:
    """The serial of the certificate a new connection is served (a fresh TCP connection)."""
    from cryptography import x509

    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="localhost") as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


async def test_certificate_password_and_client_ca_changes_apply_without_restart(pki):
    cfg = _write_config(pki["dir"] / "web.yml", f"""
tls_server_config:
  cert_file: server.crt
  key_file: server.key
  client_auth_type: VerifyClientCertIfGiven
  client_ca_file: clients.pem
basic_auth_users: {{p: '{_hash("one")}'}}
""")
    running = await _serve(pki, cfg)
    try:
        first = await asyncio.to_thread(_served_serial, running.url, pki["ca"])
        ca: CA = pki["_ca"]  # type: ignore[assignment]
        tmp_crt, tmp_key = pki["dir"] / "new.crt", pki["dir"] / "new.key"
        second = ca.issue("server-2", tmp_crt, tmp_key)
        os.replace(tmp_key, pki["key"])  # as a Secret volume update: files replaced
        os.replace(tmp_crt, pki["crt"])
        assert await asyncio.to_thread(_served_serial, running.url, pki["ca"]) == second != first

        url = f"{running.url}/metrics"
        assert (await _get(url, _client_ctx(pki), ("p", "one")))[0] == 200
        cfg.write_text(cfg.read_text().replace(
            cfg.read_text().split("p: ")[1].strip().rstrip("}"), f"'{_hash('two')}'"))
        assert (await _get(url, _client_ctx(pki), ("p", "one")))[0] == 401
        assert (await _get(url, _client_ctx(pki), ("p", "two")))[0] == 200

        # The client CA rotated to another CA: its client certificates are now the accepted ones.
        url_ok = await _get(url, _client_ctx(pki, cert="client"), ("p", "two"))
        assert url_ok[0] == 200
        pki["clients"].write_bytes(pki["other_ca"].read_bytes())
        assert (await _get(url, _client_ctx(pki, cert="rogue"), ("p", "two")))[0] == 200
        with pytest.raises(aiohttp.ClientError):
            await _get(url, _client_ctx(pki, cert="client"), ("p", "two"))
    finally:
        await running.stop()


async def test_a_broken_file_on_reload_keeps_the_previous_configuration(pki, caplog):
    cfg = _write_config(pki["dir"] / "web.yml",
                        "tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    running = await _serve(pki, cfg)
    try:
        serial = await asyncio.to_thread(_served_serial, running.url, pki["ca"])
        pki["crt"].write_text("not a certificate")
        assert await asyncio.to_thread(_served_serial, running.url, pki["ca"]) == serial
        assert any("web config not reloaded" in r.getMessage() for r in caplog.records)
        assert (await _get(f"{running.url}/healthz", _client_ctx(pki)))[0] == 200
    finally:
        await running.stop()


@pytest.mark.parametrize("text,needle", [
    ("tls_server_config: {cert_file: server.crt}", "cert_file and key_file go together"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, "
     "client_auth_type: RequireAnyClientCert}", "not supported"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, "
     "client_auth_type: RequireAndVerifyClientCert}", "needs client_ca_file"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, min_version: TLS9}",
     "min_version"),
    ("tls_server_config: {cert_file: nope.crt, key_file: server.key}", "cannot load"),
    ("tls_server_config: {cert_file: server.crt, key_file: server.key, cipher_suites: [x]}",
     "not supported"),
    ("basic_auth_users: {u: plaintext}", "not a bcrypt hash"),
    ("http_server_config: {headers: {X-Custom: x}}", "cannot be configured"),
    ("tls_config: {}", "unknown key 'tls_config'"),
    ("[1, 2", "not YAML"),
])
def test_web_config_mistakes(pki, text, needle):
    with pytest.raises(WebConfigError, match=needle):
        parse(text, pki["dir"] / "web.yml")


def test_plain_config_without_tls_keys(pki):
    cfg = parse(f"basic_auth_users: {{u: '{_hash('x')}'}}\n", pki["dir"] / "web.yml")
    assert cfg.tls is None and set(cfg.users) == {"u"}


def test_web_config_mistake_is_a_one_line_config_error(pki):
    bad = _write_config(pki["dir"] / "web.yml", "tls_server_config: {cert_file: server.crt}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAROZ_EXPORTER_")}
    res = subprocess.run([sys.executable, "-m", "exporter.cli", "serve", "--kube", "off",
                          "--listen", "127.0.0.1:0", "--webhook-secret-file", str(pki["secret"]),
                          "--web.config.file", str(bad)], capture_output=True, text=True,
                         cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert res.returncode == 2
    assert len(res.stderr.splitlines()) == 1, res.stderr
    assert "--web-config-file" in res.stderr and str(bad) in res.stderr
    res = subprocess.run([sys.executable, "-m", "exporter.cli", "serve", "--kube", "off",
                          "--listen", "127.0.0.1:0", "--webhook-secret-file", str(pki["secret"])],
                         capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**env, "PYTHONPATH": str(ROOT),
                              "ZAROZ_EXPORTER_WEB_CONFIG_FILE": "/nonexistent.yml"})
    assert res.returncode == 2 and "/nonexistent.yml" in res.stderr


def test_config_error_names_flag():
    e = ConfigError("--web-config-file", "x.yml", "cannot read")
    assert e.line("serve") == "zaroz-exporter serve: error: --web-config-file 'x.yml': cannot read"


async def test_webhook_on_its_own_listener_with_its_own_web_config(pki):
    """With --webhook-listen, /metrics is not reachable there and the webhook is not on
    --listen; each listener has its own web config (here: webhook TLS, metrics basic auth)."""

    hashed = _hash("m")
    metrics_cfg = _write_config(pki["dir"] / "metrics.yml",
                                f"basic_auth_users: {{m: '{hashed}'}}\n")
    hook_cfg = _write_config(pki["dir"] / "hook.yml",
                             "tls_server_config: {cert_file: server.crt, key_file: server.key}\n")
    args = build_parser().parse_args([
        "serve", "--listen", "127.0.0.1:0", "--kube", "off", "--webhook-secret-file",
        str(pki["secret"]), "--web-config-file", str(metrics_cfg),
        "--webhook-listen", "127.0.0.1:0", "--webhook-web-config-file", str(hook_cfg)])
    running = await start(ServeConfig.from_args(args))
    try:
        hook, metrics = running.webhook_url, running.url
        assert hook is not None and hook.startswith("https://") and metrics.startswith("http://")
        ctx = _client_ctx(pki)
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{hook}/v1/webhooks/events", ssl=ctx, data=b"{}",
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400  # reached the receiver: refused, unsigned and unnamed
                assert (await r.json())["error"]["code"] == "missing_workload"
            for path in ("/metrics", "/"):
                async with s.get(f"{hook}{path}", ssl=ctx) as r:
                    assert r.status == 404
            async with s.get(f"{hook}/healthz", ssl=ctx) as r:
                assert r.status == 200
            auth = {"Authorization": "Basic " + base64.b64encode(b"m:m").decode()}
            async with s.post(f"{metrics}/v1/webhooks/events", data=b"{}", headers={
                    **auth, "Content-Type": "application/json"}) as r:
                assert r.status in (404, 405)
            async with s.get(f"{metrics}/metrics", headers=auth) as r:
                assert r.status == 200
                assert "zaroz_webhook_deliveries_total" in await r.text()
    finally:
        await running.stop()

def test_webhook_listener_mistakes(pki):
    from exporter.commands import config

    def args(*extra: str):
        return build_parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--kube", "off",
                                          *extra])

    with pytest.raises(ConfigError, match="needs --webhook-secret-file"):
        config.validate(args("--events-url", "http://x/", "--webhook-listen", "127.0.0.1:0"))
    with pytest.raises(ConfigError, match="needs --webhook-listen"):
        config.validate(args("--webhook-secret-file", str(pki["secret"]),
                             "--webhook-web-config-file", "x.yml"))
    with pytest.raises(ConfigError, match="is the --listen address"):
        config.validate(build_parser().parse_args([
            "serve", "--listen", "127.0.0.1:19999", "--kube", "off", "--webhook-secret-file",
            str(pki["secret"]), "--webhook-listen", "127.0.0.1:19999"]))
