"""Real components the tests use: a missing one fails under CI (CI=true) and skips elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, NoReturn

import pytest


def missing(msg: str) -> NoReturn:
    """Fail under CI (where .ci/run must have installed it), skip elsewhere. The reason starts
    with the test that needed the component, and the skip is reported at that test's line (as a
    skip mark is), not at this one: `pytest -ra` then says which test did not run and why."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    reason = f"{test}: {msg}" if test else msg
    if os.environ.get("CI"):
        pytest.fail(reason)
    # _use_item_location: what pytest's own skip marks use to report the test's location
    raise pytest.skip.Exception(reason, _use_item_location=True)


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (.ci/run installs it)")
    return path


def start_prometheus(prometheus: str, config: object, data: object, port: int, *flags: str,
                     stderr: Any = subprocess.DEVNULL, log_level: str = "warn"
                     ) -> subprocess.Popen[bytes]:
    """A real Prometheus on 127.0.0.1:`port` with `config` and its TSDB in `data` (paths), plus
    `flags` (e.g. --enable-feature=native-histograms); stop it with stop_process."""
    return subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
         f"--web.listen-address=127.0.0.1:{port}", f"--log.level={log_level}", *flags],
        stdout=subprocess.DEVNULL, stderr=stderr)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s: a component a test started must not outlive it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# promtool 2.53+ for the native-histogram promtool tests (bookworm's 2.42 cannot write native
# histogram series): .ci/components unpacks Debian trixie's here; PROMTOOL_NATIVE overrides.
PROMTOOL_NATIVE_DEFAULT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    ".ci", "cache", "promtool-2.53", "usr", "bin", "promtool",
)


def require_promtool_native() -> str:
    """promtool >= 2.53 (env PROMTOOL_NATIVE, else .ci/cache's), which reads native histogram
    input series in `promtool test rules`."""
    path = os.environ.get("PROMTOOL_NATIVE") or PROMTOOL_NATIVE_DEFAULT
    if not os.access(path, os.X_OK):
        missing(f"promtool 2.53+ is not at {path} (.ci/components fetches it; "
                "or set PROMTOOL_NATIVE)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    version = out.stdout.split()[2] if out.stdout.startswith("promtool, version ") else ""
    major, minor = (int(x) for x in version.split(".")[:2]) if version.count(".") >= 2 else (0, 0)
    if (major, minor) < (2, 53):
        missing(f"{path} is promtool {version or out.stdout!r}; the native tests need 2.53+")
    return path


CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".ci", "cache")

# The newest end of the supported range (docs/compatibility.md), unpacked by .ci/components from
# Debian sid's .debs: (directory under .ci/cache, binary, environment variable that overrides it).
PROMETHEUS_3 = ("prometheus-3.5", "prometheus", "PROMETHEUS_3")
PROMTOOL_3 = ("promtool-3.5", "promtool", "PROMTOOL_3")
ALERTMANAGER_NEW = ("alertmanager-0.33", "prometheus-alertmanager", "ALERTMANAGER_NEW")
AMTOOL_NEW = ("alertmanager-0.33", "amtool", "AMTOOL_NEW")
VICTORIA_METRICS = ("victoria-metrics-1.145", "victoria-metrics", "VICTORIA_METRICS")
VMAGENT = ("victoria-metrics-1.145", "vmagent", "VMAGENT")
VMALERT = ("victoria-metrics-1.145", "vmalert", "VMALERT")


def require_cached(component: tuple[str, str, str]) -> str:
    """A binary .ci/components unpacked (or the one its environment variable names)."""
    directory, binary, env = component
    path = os.environ.get(env) or os.path.join(CACHE, directory, "usr", "bin", binary)
    if not os.access(path, os.X_OK):
        missing(f"{binary} ({directory}) is not at {path} (.ci/components fetches it; "
                f"or set {env})")
    return path


# Debian's Alertmanager reads its default templates from this directory (a build-time path, no
# flag moves it): Alertmanager 0.33 unpacked under .ci/cache has them there, not on the system.
DEBIAN_ALERTMANAGER_ASSETS = "/usr/share/prometheus/alertmanager"


def alertmanager_argv(binary: str) -> list[str]:
    """The command that runs `binary` with its Debian assets found: itself when they are
    installed, else through a private mount namespace (`unshare`, no privilege needed) in which
    the unpacked package's usr/share is overlaid on /usr/share for that process alone."""
    share = os.path.join(os.path.dirname(os.path.dirname(binary)), "share")
    if os.path.isdir(DEBIAN_ALERTMANAGER_ASSETS) or not os.path.isdir(
            os.path.join(share, "prometheus", "alertmanager")):
        return [binary]
    unshare = require("unshare")
    mount = f"mount -t overlay overlay -o lowerdir={share}:/usr/share /usr/share"
    return [unshare, "--mount", "--map-root-user", "sh", "-c", f'{mount} && exec "$0" "$@"',
            binary]
