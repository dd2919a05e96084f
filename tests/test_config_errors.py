"""Configuration mistakes end at once: exit code 2 and exactly one stderr line naming the flag,
the value and the cause; no traceback, no "Unclosed client session". The real CLI runs as a
subprocess, so everything it prints is seen."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.commands import config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """No ZAROZ_EXPORTER_*, OTEL_* or KUBECONFIG from the outside, and an empty HOME."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("ZAROZ_EXPORTER_", "OTEL_", "KUBERNETES_")) and k != "KUBECONFIG"}
    e["HOME"] = str(tmp_path / "home")
    e["PYTHONPATH"] = str(ROOT)
    return e


def cli(env: dict[str, str], *argv: str, stdin: bytes | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.cli", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60,
                          input=None if stdin is None else stdin.decode())


def one_line_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert res.returncode == 2, (res.returncode, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and "Unclosed" not in res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


ROUTE = ["serve", "--events-url", "http://127.0.0.1:9/", "--kube", "off"]


@pytest.mark.parametrize("listen,cause", [
    ("999.1.1.1:1", "not an IPv4 address"),
    ("nonsense", "not host:port"),
    ("127.0.0.1:70000", "not host:port"),
    ("192.0.2.1:9817", "cannot listen"),  # TEST-NET: an address this host does not have
])
def test_listen_that_cannot_work(env, listen, cause):
    one_line_error(cli(env, *ROUTE, "--listen", listen), "--listen", listen, cause)


def test_listen_port_in_use(env, busy_port):
    listen = f"127.0.0.1:{busy_port}"
    one_line_error(cli(env, *ROUTE, "--listen", listen), "--listen", listen,
                   "Address already in use")


def test_state_dir_is_a_file(env, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", "--state-dir", str(f)),
                   "--state-dir", str(f), "not a directory")


def test_state_dir_cannot_be_created(env, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    d = f / "sub"
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", "--state-dir", str(d)),
                   "--state-dir", str(d), "cannot create")


def test_state_dir_is_created_when_missing(tmp_path):
    d = tmp_path / "a" / "b"
    config.check_state_dir("--state-dir", str(d))
    assert d.is_dir()


def test_webhook_secret_file_missing(env):
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", "--webhook-secret-file",
                       "/nonexistent"), "--webhook-secret-file", "/nonexistent",
                   "No such file")


@pytest.mark.parametrize("url", ["not-a-url", "ftp://x/", "http://", "http://h:99999/"])
def test_events_url_not_a_url(env, url):
    one_line_error(cli(env, "serve", "--listen", "127.0.0.1:0", "--kube", "off",
                       "--events-url", url), "--events-url", url)


def test_kubeconfig_missing_is_an_error_even_under_auto(env):
    one_line_error(cli(env, *ROUTE[:3], "--kube", "auto", "--listen", "127.0.0.1:0",
                       "--kubeconfig", "/nonexistent"), "--kubeconfig", "/nonexistent",
                   "No such file")


def test_kubeconfig_unusable_is_an_error_even_under_auto(env, tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    one_line_error(cli(env, *ROUTE[:3], "--listen", "127.0.0.1:0", "--kubeconfig", str(kc)),
                   "--kubeconfig", str(kc), "no Kubernetes access")


def test_kube_on_without_a_cluster(env):
    one_line_error(cli(env, *ROUTE[:3], "--kube", "on", "--listen", "127.0.0.1:0"),
                   "--kube", "'on'", "no Kubernetes access")


def test_otlp_endpoint_not_a_url(env):
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", "--otlp-endpoint", "collector"),
                   "--otlp-endpoint", "collector")


@pytest.mark.parametrize("flag,value", [("--wait", "99"), ("--page-limit", "0"),
                                        ("--gzip-level", "10"), ("--total-shards", "0"),
                                        ("--backoff-max", "-1"),
                                        ("--unit-expiry-interval", "0"),
                                        ("--checkpoint-interval", "-1"),
                                        ("--poll-interval", "-1")])
def test_numbers_out_of_range(env, flag, value):
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", flag, value), flag, value)


def test_shard_without_ordinal(env):
    env = {**env, "HOSTNAME": "box"}
    one_line_error(cli(env, *ROUTE, "--listen", "127.0.0.1:0", "--total-shards", "3"),
                   "--shard", "'box'")


def test_usage_error_is_one_line(env):
    one_line_error(cli(env, *ROUTE, "--wait", "x"), "--wait", "'x'")
    one_line_error(cli(env, "serve", "--no-such-flag"), "--no-such-flag")


@pytest.mark.parametrize("var,value", [("ZAROZ_EXPORTER_WAIT", "abc"),
                                       ("ZAROZ_EXPORTER_KUBE", "maybe"),
                                       ("ZAROZ_EXPORTER_REPLAY_SUMMARY", "perhaps")])
def test_bad_environment_variable(env, var, value):
    one_line_error(cli({**env, var: value}, *ROUTE), var, value)


def test_nothing_to_export(env):
    one_line_error(cli(env, "serve", "--listen", "127.0.0.1:0"), "nothing to export")


def test_help_never_says_default_none(env):
    for cmd in ("serve", "replay", "demo"):
        res = cli(env, cmd, "--help")
        assert res.returncode == 0
        assert "default: None" not in res.stdout and "default: []" not in res.stdout
        assert "(default: " in res.stdout or cmd == "replay"


def test_a_valid_configuration_passes(tmp_path):
    """The checks are not just refusing everything: a full valid set goes through."""
    from exporter.cli import build_parser

    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    args = build_parser().parse_args([
        "serve", "--listen", "127.0.0.1:0", "--events-url", "https://events.example:8443/x",
        "--webhook-secret-file", str(secret), "--state-dir", str(tmp_path / "state"),
        "--otlp-endpoint", "http://collector:4318", "--kube", "off"])
    config.validate(args)
    assert args.listen_addr == ("127.0.0.1", 0)
    assert args.kube_access is None
    assert args.shard_config.total == 1


def test_every_list_field_of_serve_config_is_kept_as_a_tuple():
    """A new repeated flag must be named in config._REPEATED, or it would stay a list (or None
    from the demo) in the frozen config."""
    from dataclasses import fields

    from exporter.commands.config import _REPEATED, ServeConfig

    assert {f.name for f in fields(ServeConfig) if str(f.type).startswith("tuple[str, ...]")} \
        == set(_REPEATED)
