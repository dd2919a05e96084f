"""Query parameters as kube-apiserver decodes them (metav1.ListOptions and friends).

Booleans follow apimachinery's Convert_Slice_string_To_bool: absent is false, "0" and "false"
(any case) are false, anything else (even "yes" or "") is true. So `watch=yes` is a watch on a
real server, not an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from zaroz_sim.kube.store import KubeError
from zaroz_sim.kube.validate import FieldError, invalid


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


def list_option_errors(query: Mapping[str, str], *, watch: bool) -> list[FieldError]:
    """apimachinery's ValidateListOptions (the WatchList feature on, as in kube 1.32)."""
    match = query.get("resourceVersionMatch", "")
    send = bool_param(query, "sendInitialEvents")
    cont = query.get("continue", "")
    errors: list[FieldError] = []
    forbidden = "FieldValueForbidden"
    if watch:
        if send is not None and match != "NotOlderThan":
            errors.append(FieldError(forbidden, "resourceVersionMatch", "sendInitialEvents "
                                     "requires setting resourceVersionMatch to NotOlderThan"))
        if match:
            if send is None:
                errors.append(FieldError(forbidden, "resourceVersionMatch", "resourceVersionMatch"
                                         " is forbidden for watch unless sendInitialEvents is "
                                         "provided"))  # fmt: skip
            if match != "NotOlderThan":
                errors.append(FieldError("FieldValueNotSupported", "resourceVersionMatch",
                                         'supported values: "NotOlderThan"', match))
            if cont:
                errors.append(FieldError(forbidden, "resourceVersionMatch", "resourceVersionMatch"
                                         " is forbidden when continue is provided"))
        return errors
    if match:
        if not query.get("resourceVersion"):
            errors.append(FieldError(forbidden, "resourceVersionMatch", "resourceVersionMatch is "
                                     "forbidden unless resourceVersion is provided"))
        if cont:
            errors.append(FieldError(forbidden, "resourceVersionMatch", "resourceVersionMatch is "
                                     "forbidden when continue is provided"))
        if match not in ("Exact", "NotOlderThan"):
            errors.append(FieldError("FieldValueNotSupported", "resourceVersionMatch",
                                     'supported values: "Exact", "NotOlderThan", ""', match))
        if match == "Exact" and query.get("resourceVersion") == "0":
            errors.append(FieldError(forbidden, "resourceVersionMatch", 'resourceVersionMatch '
                                     '"exact" is forbidden for resourceVersion "0"'))
    if send is not None:
        errors.append(FieldError(forbidden, "sendInitialEvents",
                                 "sendInitialEvents is forbidden for list"))
    return errors


def check_list_options(query: Mapping[str, str], *, watch: bool) -> None:
    """422 Invalid (kind ListOptions), as the list and watch handlers answer bad options."""
    errors = list_option_errors(query, watch=watch)
    if errors:
        raise invalid("ListOptions", "meta.k8s.io", "", errors)
