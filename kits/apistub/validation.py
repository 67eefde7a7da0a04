"""Write-time validation of the fields kube-steer writes: names, labels, taints.

The checks and their wording follow kube-apiserver's (`ValidateObjectMeta`, `validateNodeTaints`),
so a label the scorer computes wrongly fails here with the same 422 a real cluster would give.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kits.apistub.status import ApiError, JsonObject, failure
from steer.core.k8s_names import is_dns1123_subdomain, label_key_errors, label_value_errors

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# A node PATCH with one bad label was answered with the same cause four times (the apiserver
# validates the object in several passes and does not deduplicate causes); mirror that count.
CAUSE_REPEATS = 4


@dataclass(frozen=True)
class FieldError:
    """One apimachinery `field.Error`: the path, its cause type and its human text."""

    field: str
    reason: str
    body: str

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def _go_quote(value: Any) -> str:
    """Approximates Go's `%q`, which the apiserver uses to echo a rejected value."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(field, "FieldValueInvalid", f"Invalid value: {_go_quote(value)}: {detail}")


def required(field: str, detail: str = "") -> FieldError:
    body = "Required value" + (f": {detail}" if detail else "")
    return FieldError(field, "FieldValueRequired", body)


def not_supported(field: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    allowed = ", ".join(_go_quote(s) for s in supported)
    body = f"Unsupported value: {_go_quote(value)}: supported values: {allowed}"
    return FieldError(field, "FieldValueNotSupported", body)


def label_errors(labels: Any, field: str = "metadata.labels") -> list[FieldError]:
    """One error per failed rule, keys in sorted order (Go's map order is random anyway)."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [invalid(field, labels, "must be a map of string keys to string values")]
    errors: list[FieldError] = []
    for key in sorted(labels):
        errors += [invalid(field, key, msg) for msg in label_key_errors(key)]
        value = labels[key]
        if not isinstance(value, str):
            errors.append(invalid(field, value, "label values must be strings"))
            continue
        errors += [invalid(field, value, msg) for msg in label_value_errors(value)]
    return errors


def taint_errors(taints: Any, field: str = "spec.taints") -> list[FieldError]:
    if taints is None:
        return []
    if not isinstance(taints, list):
        return [invalid(field, taints, "must be a list of taints")]
    errors: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints):
        path = f"{field}[{i}]"
        if not isinstance(taint, dict):
            errors.append(invalid(path, taint, "must be an object with key, value and effect"))
            continue
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        errors += [invalid(f"{path}.key", key, msg) for msg in label_key_errors(str(key))]
        if msgs := label_value_errors(str(value)):
            errors.append(invalid(f"{path}.value", value, ";".join(msgs)))
        if not effect:
            errors.append(required(f"{path}.effect"))
        elif effect not in TAINT_EFFECTS:
            errors.append(not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
        if (key, effect) in seen:
            errors.append(
                FieldError(
                    path,
                    "FieldValueDuplicate",
                    f"Duplicate value: {_go_quote(taint)}: taints must be unique by key and effect pair",
                )
            )
        seen.add((key, effect))
    return errors


def object_errors(kind: str, obj: JsonObject) -> list[FieldError]:
    """Everything the stand-in checks before it stores `obj` of `kind`."""
    meta = obj.get("metadata") or {}
    errors: list[FieldError] = []
    name = meta.get("name", "")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif not is_dns1123_subdomain(name):
        errors.append(
            invalid(
                "metadata.name",
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    errors += label_errors(meta.get("labels"))
    if kind == "Node":
        errors += taint_errors((obj.get("spec") or {}).get("taints"))
    return errors


def invalid_error(
    kind: str, group: str, name: str, errors: list[FieldError], repeats: int = CAUSE_REPEATS
) -> ApiError:
    """apimachinery `NewInvalid`: the message lists each distinct error once, causes do not."""
    distinct = list(dict.fromkeys(str(e) for e in errors))
    summary = distinct[0] if len(distinct) == 1 else "[" + ", ".join(distinct) + "]"
    qualified = f"{kind}.{group}" if group else kind
    causes = [{"reason": e.reason, "message": e.body, "field": e.field} for e in errors]
    details: JsonObject = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes * repeats
    message = f'{qualified} "{name}" is invalid: {summary}'
    return ApiError(failure(422, "Invalid", message, details))
