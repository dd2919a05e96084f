"""The standard self-metrics every client_python exporter has: `process_*`, `python_info`,
`python_gc_*`.

Rendered by prometheus_client's own ProcessCollector, PlatformCollector and GCCollector (names,
help and types exactly as the ecosystem has them, so existing restart and memory alerts work),
at scrape time, after the catalog's families. They describe the process, so there is one
collector registry per process, shared by every server in it.
"""

from __future__ import annotations

import functools

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import generate_latest as generate_text
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

_EOF = b"# EOF\n"


@functools.cache
def _registry() -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    return reg


class StandardMetrics:
    """A Registry extra (see `family.Registry.extras`): the collectors' exposition."""

    def __init__(self) -> None:
        self.registry = _registry()
        self.series = 0  # samples in the last render

    def render(self, openmetrics: bool) -> bytes:
        body: bytes
        if openmetrics:
            body = generate_openmetrics(self.registry)
            body = body[: -len(_EOF)] if body.endswith(_EOF) else body
        else:
            body = generate_text(self.registry)
        self.series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        return body
