"""OpenAPI v3 for the CRD's group, published as kube-apiserver publishes a CRD's: the /openapi/v3
index (one entry per group-version, with a content hash in the URL) and the group-version's
document: the schema named by reversed group (`cloud.zaroz.units.v1.UnitSignal`), marked with
x-kubernetes-group-version-kind, metadata a $ref to ObjectMeta, and the paths with their query
parameters. kubectl reads it for `explain` and to learn that the server validates fields
(the PATCH operation's `fieldValidation` parameter) and dry runs (`dryRun`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from zaroz_sim.kube.store import Obj

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
_OBJECT_META: Obj = {
    "description": "ObjectMeta is metadata that all persisted resources must have, which "
                   "includes all objects users must create.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "namespace": {"type": "string", "description": "Namespace defines the space within "
                      "which each name must be unique."},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""},
                   "description": "Map of string keys and values that can be used to organize "
                   "and categorize (scope and select) objects."},
        "annotations": {"type": "object", "additionalProperties": {"type": "string",
                        "default": ""}, "description": "Annotations is an unstructured key "
                        "value map stored with a resource."},
        "uid": {"type": "string", "description": "UID is the unique in time and space value "
                "for this object."},
        "resourceVersion": {"type": "string", "description": "An opaque value that represents "
                            "the internal version of this object."},
        "generation": {"type": "integer", "format": "int64", "description": "A sequence number "
                       "representing a specific generation of the desired state."},
        "creationTimestamp": {"type": "string", "format": "date-time", "description":
                              "CreationTimestamp is a timestamp representing the server time "
                              "when this object was created."},
        "managedFields": {"type": "array", "items": {"type": "object",
                          "x-kubernetes-preserve-unknown-fields": True}, "description":
                          "ManagedFields maps workflow-id and version to the set of fields that "
                          "are managed by that workflow."},
    },
}  # fmt: skip
_LIST_META: Obj = {"type": "object", "description": "ListMeta describes metadata that synthetic "
                   "resources must have, including lists.", "properties": {
                       "resourceVersion": {"type": "string"}, "continue": {"type": "string"},
                       "remainingItemCount": {"type": "integer", "format": "int64"}}}  # fmt: skip
_STATUS: Obj = {"type": "object", "description": "Status is a return value for calls that don't "
                "return other objects.", "properties": {"code": {"type": "integer"},
                "message": {"type": "string"}, "reason": {"type": "string"},
                "status": {"type": "string"}}}  # fmt: skip
_API_VERSION = {"type": "string", "description": "APIVersion defines the versioned schema of "
                "this representation of an object."}  # fmt: skip
_KIND = {"type": "string", "description": "Kind is a string value representing the REST resource "
         "this object represents."}  # fmt: skip


def schema_name(group: str, version: str, kind: str) -> str:
    """kube's definition name for a CR: its group reversed (cloud.zaroz.units.v1.UnitSignal)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _ref(name: str) -> Obj:
    return {"$ref": f"#/components/schemas/{name}"}


def _param(name: str, description: str, where: str = "query", required: bool = False) -> Obj:
    return {"name": name, "in": where, "description": description, "required": required,
            "schema": {"type": "string", "uniqueItems": True}}  # fmt: skip


_WRITE_PARAMS = [
    _param("dryRun", "When present, indicates that modifications should not be persisted."),
    _param("fieldManager", "fieldManager is a name associated with the actor or entity that is "
           "making these changes."),
    _param("fieldValidation", "fieldValidation instructs the server on how to handle objects in "
           "the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
]
_LIST_PARAMS = [_param(n, n) for n in (
    "allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit",
    "resourceVersion", "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch")]


def document(crd: Mapping[str, Any], version: str) -> Obj:
    """The OpenAPI 3.0 document of /openapi/v3/apis/<group>/<version>."""
    spec = crd["spec"]
    group, names = spec["group"], spec["names"]
    kind, plural = names["kind"], names["plural"]
    served = next(v for v in spec["versions"] if v["name"] == version)
    gvk = {"group": group, "version": version, "kind": kind}
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
    props = schema.setdefault("properties", {})
    props["apiVersion"], props["kind"] = _API_VERSION, _KIND
    props["metadata"] = {"allOf": [_ref(f"{META}.ObjectMeta")],
                         "description": "Standard object's metadata."}  # fmt: skip
    schema["x-kubernetes-group-version-kind"] = [gvk]
    name = schema_name(group, version, kind)
    list_name = f"{name}List"
    list_schema: Obj = {"type": "object", "required": ["items"], "description":
                        f"{names.get('listKind', kind + 'List')} is a list of {kind}",
                        "properties": {"apiVersion": _API_VERSION, "kind": _KIND,
                                       "items": {"type": "array", "items": _ref(name)},
                                       "metadata": {"allOf": [_ref(f"{META}.ListMeta")]}},
                        "x-kubernetes-group-version-kind": [gvk | {"kind": f"{kind}List"}]}
    ok = {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(name)}}}}
    listed = {"200": {"description": "OK",
                      "content": {"application/json": {"schema": _ref(list_name)}}}}
    body = {"content": {"application/json": {"schema": _ref(name)}}, "required": True}
    patch_body = {"content": {t: {"schema": {"type": "object"}} for t in (
        "application/json-patch+json", "application/merge-patch+json",
        "application/apply-patch+yaml")}, "required": True}

    def op(action: str, responses: Obj, params: list[Obj], **extra: Any) -> Obj:
        return {"operationId": f"{action}{kind}", "parameters": params, "responses": responses,
                "x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk} | extra

    ns = _param("namespace", "object name and auth scope", "path", True)
    obj_name = _param("name", f"name of the {kind}", "path", True)
    base = f"/apis/{group}/{version}"
    collection = f"{base}/namespaces/{{namespace}}/{plural}"
    paths: Obj = {
        f"{base}/{plural}": {"get": op("list", listed, _LIST_PARAMS)},
        collection: {
            "parameters": [ns],
            "get": op("list", listed, _LIST_PARAMS),
            "post": op("post", ok, _WRITE_PARAMS, requestBody=body),
            "delete": op("deletecollection", {"200": ok["200"]}, _LIST_PARAMS),
        },
        f"{collection}/{{name}}": {
            "parameters": [obj_name, ns],
            "get": op("get", ok, []),
            "put": op("put", ok, _WRITE_PARAMS, requestBody=body),
            "patch": op("patch", ok, [*_WRITE_PARAMS, _param("force", "force apply")],
                        requestBody=patch_body),
            "delete": op("delete", ok, _WRITE_PARAMS[:1]),
        },
    }
    if "status" in (served.get("subresources") or {}):
        paths[f"{collection}/{{name}}/status"] = {
            "parameters": [obj_name, ns],
            "get": op("get", ok, []),
            "put": op("put", ok, _WRITE_PARAMS, requestBody=body),
            "patch": op("patch", ok, [*_WRITE_PARAMS, _param("force", "force apply")],
                        requestBody=patch_body),
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
            "paths": paths, "components": {"schemas": {
                name: schema, list_name: list_schema, f"{META}.ObjectMeta": _OBJECT_META,
                f"{META}.ListMeta": _LIST_META, f"{META}.Status": _STATUS}}}  # fmt: skip


def index(docs: Mapping[str, bytes]) -> Obj:
    """/openapi/v3: each group-version's path and its URL, with the document's hash in it."""
    return {"paths": {path: {"serverRelativeURL": f"/openapi/v3/{path}?hash="
                             f"{hashlib.sha512(raw).hexdigest()[:128].upper()}"}
                      for path, raw in docs.items()}}  # fmt: skip


def documents(crd: Mapping[str, Any] | None) -> dict[str, bytes]:
    """Every group-version document the server publishes, serialised, keyed by its path."""
    if crd is None:
        return {}
    return {f"apis/{crd['spec']['group']}/{v['name']}": orjson.dumps(document(crd, v["name"]))
            for v in crd["spec"]["versions"] if v.get("served")}  # fmt: skip
