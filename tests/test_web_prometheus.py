"""A real Prometheus scrapes `serve` over TLS with basic auth and over mTLS; its scrapes fail
with a wrong password or without a client certificate; and a server certificate replaced on disk
is served without a restart (a job that trusts only the new certificate's CA comes up)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.parse
from pathlib import Path

import aiohttp
import bcrypt

from exporter.cli import build_parser
from exporter.commands.config import ServeConfig
from exporter.commands.serve import start
from tests.certs import CA
from tests.components import require
from tests.serving import free_port

PASSWORD = "scrape-me"


def _job(name: str, target: str, tls: dict, auth: dict | None = None) -> dict:
    job = {"job_name": name, "scheme": "https", "tls_config": tls,
           "static_configs": [{"targets": [target]}]}
    if auth:
        job["basic_auth"] = auth
    return job


async def _up(session: aiohttp.ClientSession, base: str) -> dict[str, float]:
    q = urllib.parse.urlencode({"query": "up"})
    async with session.get(f"{base}/api/v1/query?{q}") as r:
        body = await r.json()
    return {s["metric"]["job"]: float(s["value"][1]) for s in body["data"]["result"]}


async def _wait_for(session, base: str, want: dict[str, float], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    up: dict[str, float] = {}
    while time.monotonic() < deadline:
        try:
            up = await _up(session, base)
        except (aiohttp.ClientError, KeyError, ValueError):
            up = {}
        if all(up.get(j) == v for j, v in want.items()):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"up never became {want}; last {up}")


async def test_prometheus_scrapes_over_tls_basic_auth_and_mtls(tmp_path: Path):
    prometheus = require("prometheus")
    ca, new_ca = CA.make("ca"), CA.make("rotated")
    ca.write(tmp_path / "ca.pem")
    new_ca.write(tmp_path / "new-ca.pem")
    ca.issue("server", tmp_path / "server.crt", tmp_path / "server.key")
    ca.issue("server-mtls", tmp_path / "mtls.crt", tmp_path / "mtls.key")
    ca.issue("prometheus", tmp_path / "client.crt", tmp_path / "client.key", client=True)
    (tmp_path / "secret").write_text("s\n")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    (tmp_path / "basic.yml").write_text(
        "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
        f"basic_auth_users: {{prometheus: '{hashed}'}}\n")
    (tmp_path / "mtls.yml").write_text(
        "tls_server_config: {cert_file: mtls.crt, key_file: mtls.key, "
        "client_auth_type: RequireAndVerifyClientCert, client_ca_file: ca.pem}\n")

    exporters = []
    for web in ("basic.yml", "mtls.yml"):
        args = build_parser().parse_args([
            "serve", "--listen", "127.0.0.1:0", "--kube", "off", "--webhook-secret-file",
            str(tmp_path / "secret"), "--web.config.file", str(tmp_path / web)])
        exporters.append(await start(ServeConfig.from_args(args)))
    basic, mtls = (e.url.removeprefix("https://") for e in exporters)
    ca_file = str(tmp_path / "ca.pem")
    client = {"ca_file": ca_file, "cert_file": str(tmp_path / "client.crt"),
              "key_file": str(tmp_path / "client.key")}
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            _job("basic_ok", basic, {"ca_file": ca_file},
                 {"username": "prometheus", "password": PASSWORD}),
            _job("basic_wrong_password", basic, {"ca_file": ca_file},
                 {"username": "prometheus", "password": "nope"}),
            _job("mtls_ok", mtls, client),
            _job("mtls_no_client_cert", mtls, {"ca_file": ca_file}),
            # Trusts only the CA of the certificate the basic listener will be rotated to.
            _job("rotated", basic, {"ca_file": str(tmp_path / "new-ca.pem")},
                 {"username": "prometheus", "password": PASSWORD}),
        ],
    }
    (tmp_path / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn", stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            await _wait_for(s, base, {"basic_ok": 1, "basic_wrong_password": 0, "mtls_ok": 1,
                                      "mtls_no_client_cert": 0, "rotated": 0})
            for job in ("basic_ok", "mtls_ok"):  # the exposition arrived, not just a 200
                q = urllib.parse.urlencode({"query": f'process_start_time_seconds{{job="{job}"}}'
                                            f' and on() zaroz_exporter_build_info{{job="{job}"}}'})
                async with s.get(f"{base}/api/v1/query?{q}") as r:
                    assert (await r.json())["data"]["result"], job

            new_ca.issue("server-rotated", tmp_path / "n.crt", tmp_path / "n.key")
            os.replace(tmp_path / "n.key", tmp_path / "server.key")
            os.replace(tmp_path / "n.crt", tmp_path / "server.crt")
            await _wait_for(s, base, {"rotated": 1, "mtls_ok": 1, "mtls_no_client_cert": 0,
                                      "basic_wrong_password": 0})
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        for e in exporters:
            await e.stop()
