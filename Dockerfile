# zaroz-exporter image: the locked runtime dependencies only, non-root, read-only root friendly,
# with its SBOM. Build: docker build -t ghcr.io/zaroz/zaroz-exporter:0.1.0 .
#
# The base is pinned by tag and by digest: the tag says which Python and Debian it is, the digest
# (of the tag's multi-architecture index, linux/amd64 and linux/arm64) makes a rebuild start from
# the same bytes. The digest was read from public build files pinning this tag, not from the
# registry (none is reachable where this was written): `docker buildx imagetools inspect
# python:3.11.14-slim-bookworm` shows the index digest; bump tag and digest together, on purpose.
#
# Containerfile.local (.ci/image, where no registry is reachable) builds the same stages in the
# same order on a Debian bookworm base made by mmdebstrap. What differs there: the base (Debian's
# python3 3.11 at /usr/bin instead of python.org's 3.11.14 at /usr/local/bin), the host's CA
# bundle mounted for pip (this machine's outbound TLS is re-signed), and how the base's own pip
# is removed (dpkg --purge instead of pip uninstall).

# Stage 1: build. Tools from deploy/image/build.lock (hatchling builds the wheel, cyclonedx-bom
# writes the SBOM) in a venv of their own; the runtime dependencies from deploy/image/runtime.lock
# in /opt/zaroz, every file checked against its sha256 (--require-hashes) and nothing resolved
# (--no-deps: the lock is the whole set; `pip check` proves it complete). Wheels only: the slim
# base has no compiler, and no build tool reaches the runtime stage.
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY deploy/image/runtime.lock deploy/image/build.lock /src/deploy/image/
RUN python -m venv /opt/build-tools \
    && /opt/build-tools/bin/pip install --require-hashes --no-deps --only-binary :all: \
       -r deploy/image/build.lock \
    && python -m venv /opt/zaroz \
    && /opt/zaroz/bin/pip install --require-hashes --no-deps --only-binary :all: \
       -r deploy/image/runtime.lock
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY zaroz_sim ./zaroz_sim
COPY schemas ./schemas
COPY dashboards/json ./dashboards/json
COPY docs ./docs
COPY deploy/overlays/dev/crd.yaml ./deploy/overlays/dev/crd.yaml
# The project's wheel (its own code, not in the lock), then pip and setuptools leave the venv,
# and the SBOM is written of what is left: exactly what the runtime stage gets.
RUN /opt/build-tools/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /dist . \
    && /opt/zaroz/bin/pip install --no-deps --no-index /dist/*.whl \
    && /opt/zaroz/bin/pip check \
    && /opt/zaroz/bin/python -m pip uninstall -y -q pip setuptools \
    && mkdir -p /sbom \
    && /opt/build-tools/bin/cyclonedx-py environment --output-reproducible --of JSON \
       --pyproject pyproject.toml -o /sbom/sbom.cdx.json /opt/zaroz/bin/python

# Stage 2: the runtime: the base's interpreter, the venv and the SBOM, nothing else. The base's
# own pip, setuptools and wheel go, with ensurepip's bundled wheels: nothing in the image can
# install anything (.ci/image checks it).
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/zaroz/bin:$PATH
# A numeric UID/GID, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN python -m pip uninstall -y -q pip setuptools wheel \
    && rm -rf /usr/local/lib/python3.11/ensurepip \
    && groupadd --system --gid 10001 zaroz \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin zaroz \
    && mkdir -p /var/lib/zaroz-exporter && chown 10001:10001 /var/lib/zaroz-exporter
COPY --from=build /opt/zaroz /opt/zaroz
# The CycloneDX SBOM of /opt/zaroz (every locked release and the exporter itself).
COPY --from=build /sbom/sbom.cdx.json /usr/share/doc/zaroz-exporter/sbom.cdx.json
USER 10001:10001
WORKDIR /var/lib/zaroz-exporter
EXPOSE 9817 9818
ENTRYPOINT ["zaroz-exporter"]
CMD ["serve"]
