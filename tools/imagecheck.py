"""Checks of the image's audit trail: the lock, the SBOM, and nothing left that could install.

- `covers`: deploy/image/runtime.lock pins every runtime dependency of pyproject.toml, each
  `name==version` with sha256 hashes, at a version its specifier allows (tests/test_image_lock.py).
- `sbom LOCK SBOM`: the CycloneDX SBOM written in the image lists exactly the locked versions,
  plus the project itself (.ci/image, on the SBOM it copies out of the image).
- `installers-left`: run inside the image (`python3 - installers-left < tools/imagecheck.py`):
  pip, setuptools, wheel (as packages, wheels or commands) and compilers are all gone.

Standard library only, so the last one runs in the image, where nothing else may be installed.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = ROOT / "deploy" / "image" / "runtime.lock"
BUILD_LOCK = ROOT / "deploy" / "image" / "build.lock"
# The platform the lock is for (deploy/image/lock): markers are evaluated there.
PLATFORM = {"python_version": "3.11", "python_full_version": "3.11.14", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


class LockError(ValueError):
    """A lock line that is not `name==version --hash=sha256:...`."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


def normalize(name: str) -> str:
    """PEP 503: the same distribution whatever its case and separators."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, Pin]:
    """Every requirement of a `--generate-hashes` lock; anything else in it is refused (an
    unpinned or unhashed line, an editable, a URL, an index option)."""
    pins: dict[str, Pin] = {}
    logical = re.sub(r"\\\n", " ", text)
    for n, raw in enumerate(logical.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _PIN.match(line)
        if m is None:
            raise LockError(f"line {n}: not a pinned requirement: {line[:80]!r}")
        rest = line[m.end():]
        hashes = tuple(_HASH.findall(rest))
        leftover = _HASH.sub("", rest).strip()
        if not hashes:
            raise LockError(f"line {n}: {m.group(1)}=={m.group(3)} has no sha256 hash")
        if leftover and not leftover.startswith(";"):  # only an environment marker may stay
            raise LockError(f"line {n}: unexpected {leftover[:60]!r}")
        name = normalize(m.group(1))
        if name in pins:
            raise LockError(f"line {n}: {name} pinned twice")
        pins[name] = Pin(name, m.group(3), hashes)
    if not pins:
        raise LockError("no requirement in the lock")
    return pins


def runtime_dependencies(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def uncovered(dependencies: list[str], pins: dict[str, Pin]) -> list[str]:
    """Dependencies (for the lock's platform) the lock leaves out or pins outside their
    specifier: empty when the lock covers them."""
    from packaging.requirements import Requirement

    bad = []
    for dep in dependencies:
        req = Requirement(dep)
        if req.marker is not None and not req.marker.evaluate(PLATFORM):
            continue
        pin = pins.get(normalize(req.name))
        if pin is None:
            bad.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(pin.version, prereleases=True):
            bad.append(f"{req.name}: locked {pin.version}, pyproject wants {req.specifier}")
    return bad


def sbom_mismatches(pins: dict[str, Pin], sbom: dict[str, object], project: str) -> list[str]:
    """How the SBOM's components differ from the lock: a locked release missing or at another
    version, or a component that is neither locked nor the project (pip left behind, say)."""
    found: dict[str, set[str]] = {}
    comps = list(sbom.get("components") or [])  # type: ignore[call-overload]
    root = (sbom.get("metadata") or {}).get("component")  # type: ignore[attr-defined]
    for comp in [*comps, *([root] if root else [])]:
        if isinstance(comp, dict) and "name" in comp:
            found.setdefault(normalize(str(comp["name"])), set()).add(str(comp.get("version")))
    bad = []
    for name, pin in sorted(pins.items()):
        versions = found.get(name)
        if not versions:
            bad.append(f"{name}=={pin.version}: not in the SBOM")
        elif pin.version not in versions:
            bad.append(f"{name}=={pin.version}: the SBOM has {sorted(versions)}")
    for name in sorted(found.keys() - pins.keys() - {normalize(project)}):
        bad.append(f"{name} {sorted(found[name])}: in the SBOM but not in the lock")
    if normalize(project) not in found:
        bad.append(f"{project}: the project itself is not in the SBOM")
    return bad


INSTALLERS = ("pip", "setuptools", "wheel", "pkg_resources", "_distutils_hack")
COMMANDS = ("pip", "pip3", "pip3.11", "easy_install", "wheel", "gcc", "cc", "c++", "g++",
            "clang", "make", "ld", "as")


def installers_left(root: str = "/") -> list[str]:
    """Paths through which something could still be installed or compiled: pip, setuptools
    and wheel as packages, metadata or bundled wheels (ensurepip's included), and the commands
    of an installer or a compiler on the usual bin directories."""
    left = []
    skip = {os.path.join(root, d) for d in ("proc", "sys", "dev")}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in skip]
        in_site = os.path.basename(top) in ("site-packages", "dist-packages")
        for d in dirs:
            dist = d.split("-", 1)[0].lower()
            if (in_site and d in INSTALLERS) or (
                    d.endswith((".dist-info", ".egg-info")) and dist in INSTALLERS):
                left.append(os.path.join(top, d))
        for f in files:
            if f.endswith(".whl"):
                left.append(os.path.join(top, f))
    bindirs = ("usr/local/bin", "usr/bin", "bin", "usr/local/sbin", "usr/sbin", "opt/zaroz/bin")
    for bindir in bindirs:
        for cmd in COMMANDS:
            path = os.path.join(root, bindir, cmd)
            if os.path.lexists(path):
                left.append(path)
    return sorted(set(left))


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "covers":
        bad = uncovered(runtime_dependencies(), parse_lock(RUNTIME_LOCK.read_text()))
    elif what == "sbom" and len(argv) == 3:
        sbom = json.loads(Path(argv[2]).read_text())
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
        bad = sbom_mismatches(parse_lock(Path(argv[1]).read_text()), sbom, project)
    elif what == "installers-left":
        bad = installers_left(argv[1] if len(argv) > 1 else "/")
    else:
        print("usage: python -m tools.imagecheck covers | sbom LOCK SBOM | installers-left [ROOT]",
              file=sys.stderr)
        return 2
    for line in bad:
        print(f"{what}: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
