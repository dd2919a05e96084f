"""Query parameters as kube-apiserver decodes them (metav1.ListOptions and friends).

Booleans follow apimachinery's Convert_Slice_string_To_bool: absent is false, "0" and "false"
(any case) are false, anything else (even "yes" or "") is true. So `watch=yes` is a watch on a
real server, not an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from zaroz_sim.kube.store import KubeError


def bad_request(message: str) -> KubeError:
    return KubeError(400, "BadRequest", message)


def int_param(query: Mapping[str, str], name: str) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if not re.fullmatch(r"-?[0-9]+", raw):
        raise bad_request(f"{name}: invalid value {raw!r}: must be an integer")
    return int(raw)


def bool_param(query: Mapping[str, str], name: str) -> bool | None:
    """None when absent (kube's *bool stays nil), else kube's reading of the value."""
    raw = query.get(name)
    if raw is None:
        return None
    return not (raw == "0" or raw.lower() == "false")
