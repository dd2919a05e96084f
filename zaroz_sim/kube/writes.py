"""Writes as kube-apiserver does them for a custom resource with a status subresource.

create, update (PUT), patch (JSON merge patch by RFC 7386, JSON patch by RFC 6902, server-side
apply) and delete, on the main resource and on `status`:

- the main resource never writes status (create drops it, update keeps the stored one), and a
  change of anything but metadata and status bumps metadata.generation;
- `status` writes change status only, never metadata.generation;
- every write is pruned of fields the schema does not know, then validated against the CRD's
  structural schema (422 Invalid with its causes; unchanged bad values are ratcheted);
- an update must carry the current metadata.resourceVersion (409 Conflict otherwise); a patch
  only when it sets one.

The simulator calls `Writer` in-process; the emulator's HTTP handlers call the same methods.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import orjson
import yaml

from zaroz_sim.kube.params import bad_request
from zaroz_sim.kube.select import merge_patch
from zaroz_sim.kube.store import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    RESOURCE,
    KubeError,
    Obj,
    ObjectStore,
    fields_v1,
    not_found,
)
from zaroz_sim.kube.validate import FieldError, GoLiteral, StructuralSchema, invalid

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = {"merge": MERGE_PATCH, "json": JSON_PATCH, "apply": APPLY_PATCH}
_UNSUPPORTED_PATCH = ("the body of the request was in an unknown format - accepted media types "
                      f"include: {JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}")  # fmt: skip
_USER_META = ("labels", "annotations", "finalizers", "ownerReferences")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what generateName appends (no vowels)


@dataclass
class WriteOptions:
    """The query of a write: fieldManager, dryRun=All, fieldValidation (Strict|Warn|Ignore)."""

    manager: str | None = None
    dry_run: bool = False
    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)  # filled in: what the answer warns of
    created: bool = False  # filled in: the write created the object (an apply can)
    applied: Obj | None = None  # a server-side apply's fields (fieldsV1), for managedFields


def conflict(name: str) -> KubeError:
    details = {"name": name, "group": GROUP, "kind": PLURAL}
    message = (f'Operation cannot be fulfilled on {RESOURCE} "{name}": the object has been '
               "modified; please apply your changes to the latest version and try again")
    return KubeError(409, "Conflict", message, details)


def _copy(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def _spec_of(obj: Obj) -> Obj:
    """What a generation counts: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Writer:
    """The write verbs over one store, checked against one CRD version's schema."""

    def __init__(self, store: ObjectStore, schema: StructuralSchema,
                 rng: random.Random | None = None) -> None:  # fmt: skip
        self.store, self.schema = store, schema
        self.rng = rng or random.Random()

    # -- verbs -----------------------------------------------------------------------------------

    def create(self, namespace: str, body: Any, options: WriteOptions | None = None) -> Obj:
        """POST: status is dropped (it is a subresource), metadata.generation starts at 1."""
        opts = options or WriteOptions()
        obj = self._decoded(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("namespace", namespace) != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace"
                              " sent on the request")  # fmt: skip
        meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(self.rng.choice(_NAME_CHARS) for _ in range(5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        obj.pop("status", None)
        self._check(obj, None, opts, meta.get("name") or "")
        result = self.store.add(obj, manager=opts.manager, dry_run=opts.dry_run,
                                applied=opts.applied)  # fmt: skip
        opts.created = True
        return result

    def update(self, namespace: str, name: str, body: Any, *, subresource: str | None = None,
               options: WriteOptions | None = None) -> Obj:  # fmt: skip
        """PUT: needs the current metadata.resourceVersion (409 Conflict if another)."""
        obj = self._decoded(body)
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if not rv:
            raise invalid(KIND, GROUP, name, [FieldError(
                "FieldValueInvalid", "metadata.resourceVersion", "must be specified for an update",
                GoLiteral("0x0"))])  # fmt: skip
        return self._update(namespace, name, obj, subresource, options or WriteOptions(),
                            fresh=True)  # fmt: skip

    def patch(
        self,
        namespace: str,
        name: str,
        patch: Any,
        patch_type: str = MERGE_PATCH,
        *,
        subresource: str | None = None,
        options: WriteOptions | None = None,
    ) -> Obj:
        """PATCH with a content type (or "merge", "json", "apply"): the patched object is
        written as an update, conditional only if the patch sets metadata.resourceVersion."""
        patch_type = PATCH_TYPES.get(patch_type, patch_type)
        opts = options or WriteOptions()
        if patch_type not in (MERGE_PATCH, JSON_PATCH, APPLY_PATCH):
            raise KubeError(415, "UnsupportedMediaType", _UNSUPPORTED_PATCH)
        if patch_type == APPLY_PATCH and not opts.manager:
            raise KubeError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: '
                            "fieldManager: Required value: is required for apply patch")
        body = self._patch_body(patch, patch_type)
        key = f"{namespace}/{name}"
        current = self.store.objects.get(key)
        if patch_type == APPLY_PATCH:
            body = self._named(body, name)
            opts.applied = applied_fields(body)
        if current is None:
            if patch_type == APPLY_PATCH and subresource is None:
                return self.create(namespace, body, opts)
            raise not_found(name)
        base = self.store.raw[key]
        if patch_type == MERGE_PATCH:
            if not isinstance(body, dict):
                raise bad_request("a merge patch must be a JSON object")
            patched = merge_patch(orjson.loads(base), body)
        elif patch_type == JSON_PATCH:
            if not isinstance(body, list):
                raise bad_request("json: cannot unmarshal object into Go value of type "
                                  "jsonpatch.Patch")
            try:
                patched = jsonpatch.apply_patch(orjson.loads(base), body)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise KubeError(422, "Invalid", str(exc)) from None
        else:
            live = orjson.loads(base)
            patched = _apply(live, body)
            assert opts.manager is not None and opts.applied is not None
            for path in _released(live, opts.manager, opts.applied):
                _remove(patched, path)
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        meta = patched.get("metadata")
        if isinstance(meta, dict) and meta.get("resourceVersion") in (None, ""):
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._update(namespace, name, patched, subresource, opts, fresh=True)

    def delete(self, namespace: str, name: str, options: Mapping[str, Any] | None = None,
               *, dry_run: bool = False) -> Obj:  # fmt: skip
        """DELETE: gone at once (no finalizers); DeleteOptions.preconditions are checked."""
        key = f"{namespace}/{name}"
        current = self.store.objects.get(key)
        if current is None:
            raise not_found(name)
        pre = (options or {}).get("preconditions") or {}
        meta = current["metadata"]
        if pre.get("uid") and pre["uid"] != meta["uid"]:
            raise conflict(name)
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
            raise conflict(name)
        if dry_run:
            last: Obj = orjson.loads(self.store.raw[key])
            return last
        return self.store.delete(namespace, name)

    # -- the steps -------------------------------------------------------------------------------

    @staticmethod
    def _decoded(body: Any, *, copy: bool = True) -> Obj:
        """The body as a dict of its own (`copy`: it may be the caller's), of our kind."""
        raw = isinstance(body, bytes | str)
        obj = orjson.loads(body) if raw else (_copy(body) if copy else body)
        if not isinstance(obj, dict):
            raise bad_request("the body of the request is not a JSON object")
        if "kind" not in obj or "apiVersion" not in obj:
            missing = "Kind" if "kind" not in obj else "apiVersion"
            raise bad_request(f"Object '{missing}' is missing in '{orjson.dumps(obj).decode()}'")
        if obj["apiVersion"] != API_VERSION or obj["kind"] != KIND:
            raise bad_request(f"the API version in the data ({obj['apiVersion']}) does not match"
                              f" the expected API version ({API_VERSION})")  # fmt: skip
        return obj

    @staticmethod
    def _named(body: Any, name: str) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("an apply patch must be an object")
        meta = body.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the "
                              f"name on the URL ({name})")  # fmt: skip
        meta["name"] = name
        return body

    @staticmethod
    def _patch_body(patch: Any, patch_type: str) -> Any:
        if not isinstance(patch, bytes | str):
            return _copy(patch)
        try:
            if patch_type == APPLY_PATCH:
                return yaml.safe_load(patch)
            return orjson.loads(patch)
        except (orjson.JSONDecodeError, yaml.YAMLError) as exc:
            raise bad_request(f"error decoding patch: {exc}") from None

    def _update(self, namespace: str, name: str, obj: Obj, subresource: str | None,
                opts: WriteOptions, *, fresh: bool = False) -> Obj:  # fmt: skip
        """`fresh`: `obj` is this write's own (decoded or patched here), not to be copied."""
        key = f"{namespace}/{name}"
        current = self.store.objects.get(key)
        if current is None:
            raise not_found(name)
        obj = self._decoded(obj, copy=not fresh)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if meta.get("name", name) != name:
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the "
                              f"name on the URL ({name})")  # fmt: skip
        if meta.get("namespace", namespace) != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace"
                              " sent on the request")  # fmt: skip
        if str(meta.get("resourceVersion")) != current["metadata"]["resourceVersion"]:
            raise conflict(name)
        new: Obj = orjson.loads(self.store.raw[key])
        if subresource == "status":
            new.pop("status", None)
            if "status" in obj:
                new["status"] = obj["status"]
        else:
            for part in [k for k in new if k not in ("apiVersion", "kind", "metadata", "status")]:
                del new[part]
            for part, value in obj.items():
                if part not in ("apiVersion", "kind", "metadata", "status"):
                    new[part] = value
            new_meta = {k: v for k, v in new["metadata"].items()
                        if k not in _USER_META}  # fmt: skip
            user = {k: meta[k] for k in _USER_META if meta.get(k)}
            new["metadata"] = _ordered_meta(new_meta, user)
        self._check(new, current, opts, name)
        if subresource != "status" and _spec_of(new) != _spec_of(current):
            new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        return self.store.replace(new, manager=opts.manager, subresource=subresource,
                                  dry_run=opts.dry_run, applied=opts.applied)  # fmt: skip

    def _check(self, obj: Obj, old: Obj | None, opts: WriteOptions, name: str) -> None:
        pruned = self.schema.prune(obj)
        if pruned and opts.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{p}"' for p in pruned)
            raise bad_request(f"strict decoding error: {listed}")
        if opts.field_validation != "Ignore":
            opts.warnings.extend(f'unknown field "{p}"' for p in pruned)
        errors = self.schema.errors(obj, old)
        if errors:
            raise invalid(KIND, GROUP, name, errors)


def _ordered_meta(server: Obj, user: Obj) -> Obj:
    """metadata in the store's order: identity and versions, then the user's, then managedFields."""
    out = {k: v for k, v in server.items() if k != "managedFields"} | user
    if "managedFields" in server:
        out["managedFields"] = server["managedFields"]
    return out


def applied_fields(config: Obj) -> Obj:
    """The fields (FieldsV1) an applied configuration sets: labels, annotations, the rest."""
    out: Obj = {}
    meta = config.get("metadata") or {}
    owned: Obj = {f"f:{part}": {".": {}} | {f"f:{k}": {} for k in meta[part]}
             for part in ("labels", "annotations") if meta.get(part)}  # fmt: skip
    if owned:
        out["f:metadata"] = owned
    for part, value in config.items():
        if part not in ("apiVersion", "kind", "metadata"):
            out[f"f:{part}"] = fields_v1(value)
    return out


Path = tuple[str, ...]


def _leaves(fields: Obj, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, sub in fields.items():
        if key == ".":
            continue
        path = (*prefix, key.removeprefix("f:"))
        children = {k: v for k, v in sub.items() if k != "."}
        out |= _leaves(children, path) if children else {path}
    return out


def _released(live: Obj, manager: str, applied: Obj) -> set[Path]:
    """The fields `manager` applied before and no longer does, that no other manager owns:
    server-side apply removes them."""
    mine: set[Path] = set()
    others: set[Path] = set()
    for entry in live["metadata"].get("managedFields", []):
        leaves = _leaves(entry.get("fieldsV1", {}))
        if entry["manager"] == manager and entry["operation"] == "Apply":
            mine |= leaves
        elif entry.get("subresource") is None:
            others |= leaves
    return mine - _leaves(applied) - others


def _remove(obj: Any, path: Path) -> None:
    for part in path[:-1]:
        if not isinstance(obj, dict) or part not in obj:
            return
        obj = obj[part]
    if isinstance(obj, dict):
        obj.pop(path[-1], None)


def _apply(live: Any, config: Any) -> Any:
    """Server-side apply, simplified: the applied configuration merged into the live object
    (maps merge, lists and scalars are replaced: the CRD declares no list types, so its lists
    are atomic); what this manager applied before and no longer does is removed (`_released`)
    unless another manager owns it; conflicts are not reported (as with --force-conflicts)."""
    if not isinstance(config, dict) or not isinstance(live, dict):
        return config
    out = dict(live)
    for k, v in config.items():
        out[k] = _apply(live.get(k), v)
    return out



def manager_from_agent(user_agent: str) -> str:
    """kube's default fieldManager: the User-Agent up to its first '/' (and at most 128)."""
    return user_agent.split("/", 1)[0][:128] or "unknown"
