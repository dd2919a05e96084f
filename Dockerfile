# zaroz-exporter image: runtime dependencies only, non-root, read-only root filesystem friendly.
# Build: docker build -t ghcr.io/zaroz/zaroz-exporter:0.1.0 .
# The tag is pinned (not a digest, not latest) so rebuilds get the same Python minor release and
# Debian base; bump it deliberately, with tests/test_deploy.py checking the pin.

# Stage 1: build the wheel and install it with its dependencies into /install. The build
# backend (hatchling) and pip's caches stay in this stage.
FROM python:3.11.14-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY zaroz_sim ./zaroz_sim
COPY schemas ./schemas
COPY dashboards/json ./dashboards/json
COPY docs ./docs
# Every dependency ships manylinux wheels; the slim image has no compiler, so a dependency that
# would need one fails the build here instead of pulling build tools into the image.
RUN pip install --prefix=/install .

# Stage 2: the runtime: the interpreter plus what stage 1 installed, nothing else.
FROM python:3.11.14-slim-bookworm
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1
COPY --from=build /install /usr/local
# A numeric UID/GID, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
RUN groupadd --system --gid 10001 zaroz \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin zaroz \
    && mkdir -p /var/lib/zaroz-exporter && chown 10001:10001 /var/lib/zaroz-exporter
USER 10001:10001
WORKDIR /var/lib/zaroz-exporter
EXPOSE 9817 9818
ENTRYPOINT ["zaroz-exporter"]
CMD ["serve"]
