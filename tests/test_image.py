"""The Dockerfile and its local stand-in, read as text (no Docker engine here; .ci/image builds
and runs Containerfile.local): pinned base, installs from the hashed lock only, no installer in
the runtime stage, the SBOM at its documented path, and the two files doing the same steps."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SBOM = "/usr/share/doc/zaroz-exporter/sbom.cdx.json"
# How each runtime stage removes its base's own pip: the one step the two files do differently.
BASE_PIP_REMOVAL = ("python -m pip uninstall -y -q pip setuptools wheel",
                    "rm -rf /usr/local/lib/python3.11/ensurepip", "dpkg --purge")


def _stages(name: str) -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, rest) per stage, continuations joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / name).read_text(encoding="utf-8"))
    stages: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), re.sub(r"\s+", " ", rest.strip())))
    return stages


def _runs(stage: list[tuple[str, str]]) -> str:
    return " && ".join(rest for word, rest in stage if word == "RUN")


def test_the_base_is_pinned_by_tag_and_digest_in_every_stage() -> None:
    bases = {stage[0][1].split()[0] for stage in _stages("Dockerfile")}
    assert len(bases) == 1, bases  # the venv is copied between stages: one interpreter
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", bases.pop())


def test_packages_come_from_the_hashed_locks_only() -> None:
    build, _ = _stages("Dockerfile")
    installs = [c for c in re.split(r" && |; ", _runs(build)) if " install " in c]
    assert len(installs) == 3, installs  # build tools, runtime lock, the project's wheel
    for lock in ("deploy/image/build.lock", "deploy/image/runtime.lock"):
        cmd = next(c for c in installs if lock in c)
        for flag in ("--require-hashes", "--no-deps", "--only-binary :all:", f"-r {lock}"):
            assert flag in cmd, (flag, cmd)
    wheel = next(c for c in installs if "/dist/" in c)
    assert "--no-deps" in wheel and "--no-index" in wheel
    assert "pip check" in _runs(build)


def test_the_runtime_stage_gets_the_venv_and_sbom_and_keeps_no_installer() -> None:
    build, runtime = _stages("Dockerfile")
    copies = [rest for word, rest in runtime if word == "COPY"]
    assert copies == ["--from=build /opt/zaroz /opt/zaroz",
                      f"--from=build /sbom/sbom.cdx.json {SBOM}"]
    assert "pip uninstall -y -q pip setuptools wheel" in _runs(runtime)
    assert "rm -rf /usr/local/lib/python3.11/ensurepip" in _runs(runtime)
    # the venv loses pip and setuptools before the SBOM is written, so the SBOM is of what ships
    steps = _runs(build)
    uninstall = steps.index("pip uninstall -y -q pip setuptools")
    assert uninstall < steps.index("cyclonedx-py environment")
    assert "pip install" not in _runs(runtime)


def test_the_local_containerfile_does_the_dockerfiles_steps() -> None:
    """Only the base, the CA bundle for pip and the way the base's own pip is removed differ
    (both files say so)."""
    def steps(name: str) -> list[list[str]]:
        out = []
        for stage in _stages(name):
            body = []
            for word, rest in stage[1:]:
                if word == "RUN":
                    body += [re.sub(r"\bpython3?\b", "python", c.replace(" -q", ""))
                             for c in rest.split(" && ")
                             if not c.startswith(BASE_PIP_REMOVAL)]
                elif word == "ENV":
                    body.append(word + " " + rest.replace(" PIP_CERT=/run/host-ca.crt", ""))
                else:
                    body.append(f"{word} {rest}")
            out.append(body)
        return out
    docker, local = steps("Dockerfile"), steps("Containerfile.local")
    assert len(docker) == len(local) == 2
    assert docker == local
    for name in ("Dockerfile", "Containerfile.local"):
        assert "What differs" in (ROOT / name).read_text()
    assert "dpkg --purge python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl" in (
        _runs(_stages("Containerfile.local")[1]))


def test_ci_image_checks_what_the_image_promises() -> None:
    ci = (ROOT / ".ci" / "image").read_text()
    assert "-f Containerfile.local" in ci
    assert "--read-only --read-only-tmpfs=false --user 10001:10001" in ci
    for check in ("replay --workload wl -", "/healthz", "installers-left",
                  "tools.imagecheck sbom deploy/image/runtime.lock", SBOM):
        assert check in ci, check
