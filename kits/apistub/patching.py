"""The four PATCH flavours kube-apiserver accepts, applied to plain JSON objects.

Which flavour a client sends decides whether a concurrent writer's change survives (a strategic
merge of `spec.taints` replaces the list wholesale), so the semantics here follow the apiserver,
not whatever would be convenient.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import yaml

from kits.apistub.status import JsonObject, bad_request, unprocessable_patch
from kits.apistub.validation import invalid_error, required

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge as it behaves on the fields kube-steer writes.

    Maps merge and `null` deletes, as in a merge patch. Lists are replaced wholesale: node
    `spec.taints` has no patch merge key, which the captured apiserver answer proves. Merge-key
    lists (pod containers) and `$patch` directives are not needed by kube-steer; a directive is
    refused rather than silently treated as data.
    """
    if isinstance(patch, dict):
        directives = sorted(k for k in patch if k.startswith("$"))
        if directives:
            raise bad_request(f"strategic merge directive {directives[0]} is not supported here")
    return merge_patch(target, patch)


def json_patch(target: JsonObject, operations: Any) -> JsonObject:
    """RFC 6902; any operation that cannot apply (a failed `test` included) is a 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    try:
        result = jsonpatch.apply_patch(target, operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise unprocessable_patch() from exc
    if not isinstance(result, dict):
        raise unprocessable_patch()
    return result


def _apply_entry(obj: JsonObject, manager: str) -> JsonObject | None:
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return dict(entry)
    return None


def server_side_apply(live: JsonObject, applied: JsonObject, manager: str, now: str) -> JsonObject:
    """Server-side apply for metadata labels and annotations, which are per-key owned maps.

    Keys the manager applied before and now leaves out are removed, as the apiserver does when
    it is their only owner; other applied fields are merged in. Conflicts with other managers
    (the 409 without `force`) are not modelled. Re-applying the same thing changes nothing, not
    even the entry's time, so it is no write.
    """
    result: JsonObject = strategic_merge_patch(live, _without_managed_fields(applied))
    meta = result.setdefault("metadata", {})
    applied_meta = applied.get("metadata") or {}
    previous = _apply_entry(live, manager)
    owned_before = (previous or {}).get("fieldsV1", {}).get("f:metadata", {})
    fields: JsonObject = {}
    for field in ("labels", "annotations"):
        now_applied = applied_meta.get(field) or {}
        current = dict(meta.get(field) or {})
        for gone in {k[2:] for k in owned_before.get(f"f:{field}", {})} - set(now_applied):
            current.pop(gone, None)
        if current:
            meta[field] = current
        else:
            meta.pop(field, None)
        if now_applied:
            fields[f"f:{field}"] = {f"f:{key}": {} for key in sorted(now_applied)}
    unchanged = _without_managed_fields(result) == _without_managed_fields(live)
    if previous and unchanged and previous.get("fieldsV1") == {"f:metadata": fields}:
        return result
    entry = {
        "manager": manager,
        "operation": "Apply",
        "apiVersion": live.get("apiVersion", "v1"),
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": fields},
    }
    others = [
        e
        for e in meta.get("managedFields") or []
        if not (e.get("manager") == manager and e.get("operation") == "Apply")
    ]
    meta["managedFields"] = [entry, *others]
    return result


def _without_managed_fields(obj: JsonObject) -> JsonObject:
    out = dict(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {k: v for k, v in out["metadata"].items() if k != "managedFields"}
    return out


def parse_body(raw: bytes, content_type: str) -> Any:
    """Decode a request body; apply patches are YAML (of which JSON is a subset)."""
    try:
        if content_type == APPLY_PATCH:
            return yaml.safe_load(raw.decode("utf-8"))
        return json.loads(raw) if raw else None
    except (ValueError, yaml.YAMLError) as exc:
        raise bad_request(f"the request body is not valid for {content_type}: {exc}") from exc


def apply_patch(
    live: JsonObject, content_type: str, patch: Any, manager: str | None, now: str
) -> JsonObject:
    """Dispatch on the Content-Type the client sent."""
    if content_type == JSON_PATCH:
        return json_patch(live, patch)
    if not isinstance(patch, dict):
        raise bad_request(f"a {content_type} body must be a JSON object")
    if content_type == MERGE_PATCH:
        result: JsonObject = merge_patch(live, patch)
        return result
    if content_type == STRATEGIC_MERGE_PATCH:
        result = strategic_merge_patch(live, patch)
        return result
    if content_type == APPLY_PATCH:
        if not manager:
            required_manager = required("fieldManager", "is required for apply patch")
            raise invalid_error("PatchOptions", "meta.k8s.io", "", [required_manager], repeats=1)
        return server_side_apply(live, patch, manager, now)
    raise AssertionError(f"unhandled patch type {content_type}")
