"""Builds UnitSignal objects as the API server returns them, for tests."""

from __future__ import annotations

import copy
from typing import Any

T0 = 1_780_000_000.0  # exporter-clock seconds used by tests


def iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def status(**over: Any) -> dict[str, Any]:
    s = {
        "observedGeneration": 1, "agentVersion": "1.4.2", "signalledReady": None,
        "accepting": False, "activity": None, "activitySince": None,
        "shutdownRequestedAt": None, "allocationAck": None, "seq": 1,
    }
    s.update(over)
    return s


def unitsignal(name: str = "u1", ns: str = "team-a", *, generation: int = 1,
               status_: dict[str, Any] | None = None, workload: str | None = "wl-1",
               created: float = T0, uid: str | None = None, spec_written: float | None = None,
               **spec_over: Any) -> dict[str, Any]:
    spec = {"unitId": f"unit-{name}", "key": name, "contractVersion": 1,
            "generation": generation, "userData": {"secret": "customer-secret-value"},
            "allocation": None, "draining": False, "labels": {}}
    spec.update(spec_over)
    labels = {"units.zaroz.cloud/workload": workload} if workload else {}
    labels["team"] = "blue"
    mf = []
    if spec_written is not None:
        mf.append({"manager": "kernel", "operation": "Update", "apiVersion": "units.zaroz.cloud/v1",
                   "time": iso(spec_written), "fieldsType": "FieldsV1",
                   "fieldsV1": {"f:spec": {}}})
    obj = {
        "apiVersion": "units.zaroz.cloud/v1", "kind": "UnitSignal",
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}",
                     "resourceVersion": "1", "generation": generation,
                     "creationTimestamp": iso(created), "labels": labels, "managedFields": mf},
        "spec": spec,
    }
    if status_ is not None:
        obj["status"] = status_
    return copy.deepcopy(obj)
