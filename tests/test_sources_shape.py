"""The sources' shape: what they need from the layers beside them is a protocol (sources.ports)
that the real classes satisfy (that they import nothing above them nor from the sinks is
tests/test_layers.py's)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Mapping
from typing import Any

import pytest

from exporter.sinks.metrics.family import Registry
from exporter.sinks.metrics.kube import KubeMetrics
from exporter.sinks.metrics.route import RouteMetrics
from exporter.sinks.metrics.webhook import WebhookMetrics
from exporter.sources import ports, webhook
from exporter.sources.intake import Intake
from exporter.sources.kube.handler import ObjectHandler
from exporter.sources.kube.reflector import KubeSource, Reflector
from exporter.sources.tailer import TailSupervisor
from exporter.vocabulary import DELIVERY_APPLIED, DELIVERY_REFUSALS, DELIVERY_RESULTS
from exporter.wiring.events import Pipeline
from exporter.wiring.unitsignals import NamespaceHandler


def _methods(cls: type) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(v) for n, v in vars(cls).items()
            if not n.startswith("_") and inspect.isfunction(v)}


@pytest.mark.parametrize(("protocol", "impl"), [
    (ports.RouteRecorder, RouteMetrics),
    (ports.KubeRecorder, KubeMetrics),
    (ports.WebhookRecorder, WebhookMetrics),
    (ports.WorkloadLogs, Pipeline),
    (ports.Source, TailSupervisor),
    (ports.Source, KubeSource),
    (ports.Source, Intake),
    (ObjectHandler, NamespaceHandler),
])
def test_the_real_classes_satisfy_the_sources_protocols(protocol: Any, impl: type):
    """Structural typing is checked by the type checker; this says the same at test time: every
    method of the protocol exists with the same parameters and the same sync/async kind."""
    wanted = _methods(protocol)
    assert wanted, protocol
    for name, sig in wanted.items():
        got = getattr(impl, name, None)
        assert got is not None, f"{impl.__name__} lacks {name}"
        assert inspect.iscoroutinefunction(got) == inspect.iscoroutinefunction(
            getattr(protocol, name)), f"{impl.__name__}.{name}: sync/async differs"
        params = list(sig.parameters)
        assert list(inspect.signature(got).parameters)[:len(params)] == params, name
    if protocol is ports.WorkloadLogs:  # its one property
        pipeline = Pipeline(Registry())
        assert isinstance(pipeline.logs, Mapping)
        assert pipeline.workload("w") is pipeline.logs["w"]


def test_webhook_refusals_are_the_vocabularys():
    assert set(webhook._STATUS) == set(DELIVERY_REFUSALS)  # each refusal has its answer
    assert DELIVERY_RESULTS == DELIVERY_APPLIED + DELIVERY_REFUSALS
    assert not set(DELIVERY_APPLIED) & set(DELIVERY_REFUSALS)


def test_the_reflector_calls_only_what_the_handler_protocol_declares():
    """No probing (hasattr/getattr) of the handler: every handler call is a protocol method."""
    source = inspect.getsource(Reflector)
    assert "hasattr(" not in source and "getattr(self.handler" not in source
    tree = ast.parse(inspect.getsource(inspect.getmodule(Reflector)))  # type: ignore[arg-type]
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and isinstance(node.value, ast.Attribute) and node.value.attr == "handler"}
    assert called and called <= set(_methods(ObjectHandler)), called
