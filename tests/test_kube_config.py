"""Kubernetes access: kubeconfig users (token, client cert, exec plugin), contexts, in-cluster
service accounts and token rotation, down to a real TLS request with a client certificate."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import ssl
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from exporter.sources.kube.api import KubeApi
from exporter.sources.kube.config import (
    KubeconfigAuth,
    KubeConfigError,
    NoAuth,
    TokenFileAuth,
    from_incluster,
    from_kubeconfig,
    load_access,
)
from zaroz_sim.kube.emulator import KubeEmulator

# -- throwaway PKI -----------------------------------------------------------------------------

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key: Any, issuer: tuple[x509.Name, Any] | None, *, ca: bool = False,
          server: bool = False) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer if issuer else (name, key)
    now = dt.datetime.now(dt.UTC)
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(minutes=5))
         .not_valid_after(now + dt.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        b = b.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                          False), critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        b = b.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(obj: Any) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca = _cert("test-ca", ca_key, None, ca=True)
    out = {"ca": ca}
    for role, server in (("server", True), ("client", False)):
        k = _key()
        out[role] = _cert(f"test-{role}", k, (ca.subject, ca_key), server=server)
        out[f"{role}_key"] = k
    paths = {}
    for name, obj in out.items():
        p = d / f"{name}.pem"
        p.write_bytes(_pem(obj))
        paths[name] = p
    return paths


def b64(p: Path) -> str:
    return base64.b64encode(p.read_bytes()).decode()


def write_kubeconfig(path: Path, users: dict[str, dict], clusters: dict[str, dict],
                     contexts: dict[str, tuple[str, str]], current: str) -> Path:
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": n, "cluster": c} for n, c in clusters.items()],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u}}
                     for n, (c, u) in contexts.items()],
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


# -- kubeconfig ------------------------------------------------------------------------------

async def test_token_user_and_context_selection(tmp_path, pki):
    kc = write_kubeconfig(
        tmp_path / "config",
        users={"alice": {"token": "tok-a"}, "bob": {"token": "tok-b"}},
        clusters={"one": {"server": "https://127.0.0.1:6443",
                          "certificate-authority-data": b64(pki["ca"])},
                  "two": {"server": "https://10.0.0.2:443/", "insecure-skip-tls-verify": True,
                          "tls-server-name": "api.internal"}},
        contexts={"ctx-one": ("one", "alice"), "ctx-two": ("two", "bob")},
        current="ctx-one",
    )
    a = from_kubeconfig(str(kc))
    assert a.base_url == "https://127.0.0.1:6443"
    assert await a.auth.headers() == {"Authorization": "Bearer tok-a"}
    assert a.ssl_context is not None and a.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert a.source == "kubeconfig context ctx-one"
    b = from_kubeconfig(str(kc), "ctx-two")
    assert b.base_url == "https://10.0.0.2:443"
    assert await b.auth.headers() == {"Authorization": "Bearer tok-b"}
    assert b.ssl_context is not None and b.ssl_context.verify_mode == ssl.CERT_NONE
    assert b.request_options()["server_hostname"] == "api.internal"
    with pytest.raises(KubeConfigError):
        from_kubeconfig(str(kc), "no-such-context")
    # KUBECONFIG is honoured when no file is given.
    env = {"KUBECONFIG": str(kc)}
    assert load_access(environ=env).base_url == "https://127.0.0.1:6443"


async def test_token_file_user_follows_rotation(tmp_path):
    (tmp_path / "tok").write_text("first\n")
    kc = write_kubeconfig(tmp_path / "config", users={"u": {"tokenFile": "tok"}},
                          clusters={"c": {"server": "http://127.0.0.1:8080"}},
                          contexts={"x": ("c", "u")}, current="x")
    a = from_kubeconfig(str(kc))
    assert isinstance(a.auth, TokenFileAuth) and a.ssl_context is None
    assert await a.auth.headers() == {"Authorization": "Bearer first"}
    new = tmp_path / "tok.new"
    new.write_text("second\n")
    os.replace(new, tmp_path / "tok")
    assert await a.auth.headers() == {"Authorization": "Bearer second"}


EXEC_PLUGIN = """\
import datetime, json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(sys.argv[2]))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"token": f"exec-{n}",
                             "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
"""


def exec_kubeconfig(tmp_path: Path, lifetime: int) -> tuple[Path, Path]:
    script = tmp_path / "plugin.py"
    script.write_text(EXEC_PLUGIN)
    counter = tmp_path / f"runs-{lifetime}"
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                     "args": [str(script), str(counter), str(lifetime)],
                     "interactiveMode": "Never"}}
    kc = write_kubeconfig(tmp_path / f"config-{lifetime}", users={"u": user},
                          clusters={"c": {"server": "http://127.0.0.1:8080"}},
                          contexts={"x": ("c", "u")}, current="x")
    return kc, counter


async def test_exec_plugin_reruns_when_its_token_expires_or_is_refused(tmp_path):
    # A token valid for an hour is reused until the server refuses it.
    kc, counter = exec_kubeconfig(tmp_path, 3600)
    a = from_kubeconfig(str(kc), min_reload=0)
    assert isinstance(a.auth, KubeconfigAuth)
    assert await a.auth.headers() == {"Authorization": "Bearer exec-1"}
    assert await a.auth.headers() == {"Authorization": "Bearer exec-1"}
    assert counter.read_text() == "1"
    a.auth.invalidate()  # what a 401 does
    assert await a.auth.headers() == {"Authorization": "Bearer exec-2"}
    assert await a.auth.headers() == {"Authorization": "Bearer exec-2"}
    # A token about to expire (inside the package's 5 minute skew) is fetched again.
    kc, counter = exec_kubeconfig(tmp_path, 60)
    b = from_kubeconfig(str(kc))
    first = await b.auth.headers()
    second = await b.auth.headers()
    assert first != second and int(counter.read_text()) >= 2


async def test_exec_plugin_failing_is_a_config_error(tmp_path):
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "false",
                     "interactiveMode": "Never"}}
    kc = write_kubeconfig(tmp_path / "config", users={"u": user},
                          clusters={"c": {"server": "http://127.0.0.1:8080"}},
                          contexts={"x": ("c", "u")}, current="x")
    with pytest.raises(KubeConfigError):
        from_kubeconfig(str(kc))


async def test_client_certificate_user_over_real_tls(tmp_path, pki):
    emu = KubeEmulator(seed=2)
    emu.create("a", "one", {"unitId": "u1"})
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki["ca"]))
    server_ctx.load_cert_chain(pki["server"], pki["server_key"])
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    runner = web.AppRunner(emu.app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    port = runner.addresses[0][1]
    try:
        kc = write_kubeconfig(
            tmp_path / "config",
            users={"cert": {"client-certificate": str(pki["client"]),
                            "client-key-data": b64(pki["client_key"])}},
            clusters={"c": {"server": f"https://127.0.0.1:{port}",
                            "certificate-authority": str(pki["ca"])}},
            contexts={"x": ("c", "cert")}, current="x")
        access = from_kubeconfig(str(kc))
        assert isinstance(access.auth, NoAuth)
        async with aiohttp.ClientSession() as session:
            page = await KubeApi(session, access).list("a", limit=10)
        assert [o["metadata"]["name"] for o in page.items] == ["one"]
    finally:
        await runner.cleanup()


# -- in-cluster and plain URL ------------------------------------------------------------------

async def test_in_cluster_token_rotation(tmp_path, pki):
    sa = tmp_path / "sa"
    (sa / "..2024_01").mkdir(parents=True)
    (sa / "..2024_01" / "token").write_text("sa-1")
    (sa / "..data").symlink_to("..2024_01")
    (sa / "token").symlink_to("..data/token")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    a = from_incluster(token_file=str(sa / "token"), ca_file=str(pki["ca"]), environ=env)
    assert a.base_url == "https://10.96.0.1:443" and a.source == "in-cluster"
    assert a.ssl_context is not None
    assert await a.auth.headers() == {"Authorization": "Bearer sa-1"}
    # The kubelet's rotation: a new timestamped directory, then an atomic swap of ..data.
    (sa / "..2024_02").mkdir()
    (sa / "..2024_02" / "token").write_text("sa-2")
    (sa / "..data_tmp").symlink_to("..2024_02")
    os.replace(sa / "..data_tmp", sa / "..data")
    assert await a.auth.headers() == {"Authorization": "Bearer sa-2"}
    with pytest.raises(KubeConfigError):
        from_incluster(token_file=str(sa / "token"), ca_file=str(pki["ca"]), environ={})


def test_flag_choice(tmp_path):
    tok = tmp_path / "t"
    tok.write_text("x")
    a = load_access(api_url="http://127.0.0.1:9/", token_file=str(tok), environ={})
    assert a.base_url == "http://127.0.0.1:9" and isinstance(a.auth, TokenFileAuth)
    assert a.ssl_context is None and a.request_options() == {}
    with pytest.raises(KubeConfigError):
        load_access(token_file=str(tok), environ={})
    with pytest.raises(KubeConfigError):
        load_access(api_url="127.0.0.1:9", environ={})
    with pytest.raises(KubeConfigError):  # no kubeconfig anywhere, not in a pod
        load_access(environ={"HOME": str(tmp_path)}, kubeconfig=str(tmp_path / "missing"))
