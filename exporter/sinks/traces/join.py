"""The event log's traces joined with the cluster: a unit's spans carry its UnitSignal's
namespace, name and allowlisted labels, and its root carries the UnitSignal's generations.

The UnitSignal model (its `tap`) says which unit each object is (`spec.unitId`, the same id as
`unit.id` in events; the workload from the object's label, else its namespace, as the log's
workload) and when each spec generation is written and observed by the agent. Either side may
come first: the TraceBuilder of that workload reads what the join holds once, when the unit's
trace opens or is restored (`context`), and the join pushes every later change to the open trace
(`cluster_attrs`, `cluster_event`), so a log event costs no lookup:

- attributes: `k8s.namespace.name` (OpenTelemetry's Kubernetes convention),
  `zaroz.unitsignal.name`, and `zaroz.unitsignal.label.<name>` for each allowlisted label (the
  shape of the convention's `k8s.pod.label.<key>`; there is none for custom resources). The
  workload is already `zaroz.workload`. Nothing else of the object is read: `spec.userData`
  never reaches the join (the model does not keep it);
- root span events `generation_written` (when the spec's generation appeared) and
  `generation_observed` (when `status.observedGeneration` reached it), `zaroz.generation` the
  number; their times are the exporter's, as the model measures generation lag.

Memory: one entry per UnitSignal the model tracks, plus the `linger` most recently deleted ones
(a log read behind the cluster still finds the object of a unit destroyed meanwhile), each with
at most `MAX_WAITING` events kept until the unit's trace opens.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from exporter.model.unitsignals import Key, SignalState

if TYPE_CHECKING:
    from exporter.sinks.traces.otlp import TraceSink

Attrs = dict[str, Any]
DEFAULT_LINGER = 4096
MAX_WAITING = 16
EVENT_NAMES = {"written": "generation_written", "observed": "generation_observed"}


def attributes(key: Key, state: SignalState) -> Attrs:
    a: Attrs = {"k8s.namespace.name": key[0], "zaroz.unitsignal.name": key[1]}
    for name, value in state.labels:
        a[f"zaroz.unitsignal.label.{name}"] = value
    return a


class _Ctx:
    __slots__ = ("attrs", "waiting")

    def __init__(self) -> None:
        self.attrs: Attrs | None = None
        self.waiting: list[tuple[str, int, Attrs]] = []


class ClusterJoin:
    """A `UnitSignalModel.tap` feeding the TraceSink's builders; see the module docstring."""

    def __init__(self, sink: TraceSink, linger: int = DEFAULT_LINGER) -> None:
        self.sink = sink
        self.linger = linger
        self.live: dict[tuple[str, str], _Ctx] = {}
        self.gone: OrderedDict[tuple[str, str], _Ctx] = OrderedDict()
        self._bound: set[str] = set()

    def _ctx(self, workload: str, unit_id: str) -> _Ctx:
        k = (workload, unit_id)
        c = self.live.get(k)
        if c is None:
            c = self.gone.pop(k, None) or _Ctx()
            self.live[k] = c
        self._bind(workload)
        return c

    def _bind(self, workload: str) -> None:
        """Give the workload's builder its lookup (once; builders are made as logs appear)."""
        if workload in self._bound:
            return
        self._bound.add(workload)
        self.sink.builder(workload).context = lambda uid: self.lookup(workload, uid)

    def lookup(self, workload: str, unit_id: str) -> tuple[Attrs | None, list[Any]] | None:
        k = (workload, unit_id)
        c = self.live.get(k) or self.gone.get(k)
        return None if c is None else (c.attrs, c.waiting)

    # -- the model's tap ---------------------------------------------------------------------

    def known(self, key: Key, state: SignalState) -> None:
        if not state.unit_id:
            return
        c = self._ctx(state.workload, state.unit_id)
        c.attrs = attributes(key, state)
        self.sink.builder(state.workload).cluster_attrs(state.unit_id, c.attrs)

    def forgotten(self, key: Key, state: SignalState) -> None:
        k = (state.workload, state.unit_id)
        c = self.live.pop(k, None)
        if c is None:
            return
        self.gone[k] = c
        while len(self.gone) > self.linger:
            self.gone.popitem(last=False)

    def generation(self, workload: str, unit_id: str, what: str, generation: int,
                   at: float) -> None:
        name = EVENT_NAMES[what]
        ns = int(at * 1e9)
        attrs = {"zaroz.generation": generation}
        c = self._ctx(workload, unit_id)
        if not self.sink.builder(workload).cluster_event(unit_id, name, ns, attrs) and (
                len(c.waiting) < MAX_WAITING):
            c.waiting.append((name, ns, attrs))

    def __len__(self) -> int:
        return len(self.live) + len(self.gone)
