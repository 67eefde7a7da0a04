"""The shape of a pod as the API serves it, read once: its parts as objects and lists, its
scalar fields typed, and `UninterpretablePod` naming the field at fault when one is not.

The mutation, validation, DRA classification and `/explain` read a pod through these, so a
malformed field is named the same way by each; what the scheduler makes of what they read
(tolerations, node selection, resource sums) is in steer/core/scheduling.py.

Pure: plain mappings in (pods as the API serves them), objects, lists and names out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Json = dict[str, Any]


class UninterpretablePod(ValueError):
    """The object is not a pod the rules can read; `field` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def pod_object(parent: Mapping[str, Any], key: str, field: str) -> Mapping[str, Any]:
    """`parent[key]` as an object ({} when absent); `UninterpretablePod` naming `field` otherwise."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UninterpretablePod(field, f"expected an object, got {type(value).__name__}")
    return value


def pod_objects(parent: Mapping[str, Any], key: str, field: str) -> list[Any]:
    """`parent[key]` as a list of objects ([] when absent); `UninterpretablePod` otherwise."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise UninterpretablePod(field, "expected a list of objects")
    for item in value:  # a loop, not all(...): most lists hold one or two items
        if not isinstance(item, dict):
            raise UninterpretablePod(field, "expected a list of objects")
    return value


def pod_spec_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept a Pod object (`{metadata, spec}`) or a bare PodSpec."""
    spec = pod.get("spec")
    if isinstance(spec, Mapping) and ("containers" in spec or "metadata" in pod or "kind" in pod):
        return spec
    return pod


def requested_resources(spec: Mapping[str, Any]) -> set[str]:
    """Names of every resource a container or init container requests or limits."""
    names: set[str] = set()
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            resources = container.get("resources") or {}
            for part in ("requests", "limits"):
                names.update((resources.get(part) or {}).keys())
    return names


def node_affinity(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    affinity = pod_object(spec, "affinity", "spec.affinity")
    return pod_object(affinity, "nodeAffinity", "spec.affinity.nodeAffinity")


def required_terms(spec: Mapping[str, Any]) -> list[Json] | None:
    """The pod's required nodeSelectorTerms; None when it sets no required node affinity."""
    required = pod_object(
        node_affinity(spec),
        "requiredDuringSchedulingIgnoredDuringExecution",
        "spec.affinity.nodeAffinity.required",
    )
    if "nodeSelectorTerms" not in required or required["nodeSelectorTerms"] is None:
        return None
    field = "spec.affinity.nodeAffinity.required.nodeSelectorTerms"
    terms = pod_objects(required, "nodeSelectorTerms", field)
    for i, term in enumerate(terms):
        pod_objects(term, "matchExpressions", f"{field}[{i}].matchExpressions")
        pod_objects(term, "matchFields", f"{field}[{i}].matchFields")
    return terms


def preferred_terms(spec: Mapping[str, Any]) -> list[Json]:
    return pod_objects(
        node_affinity(spec),
        "preferredDuringSchedulingIgnoredDuringExecution",
        "spec.affinity.nodeAffinity.preferred",
    )


def scalar_fields(
    objects: Sequence[Mapping[str, Any]], field: str, kinds: Mapping[str, type]
) -> None:
    """`UninterpretablePod` naming the first field of `kinds` set in one of `objects` to a
    value of another type: the apiserver types these fields, and the merges compare them (a
    list as a toleration's key is unhashable)."""
    for i, obj in enumerate(objects):
        for name, kind in kinds.items():
            value = obj.get(name)
            if value is None or type(value) is kind:
                continue
            # JSON true is a Python int; the apiserver's integers are not booleans.
            if not isinstance(value, kind) or isinstance(value, bool):
                raise UninterpretablePod(
                    f"{field}[{i}].{name}",
                    f"expected {'an integer' if kind is int else 'a string'}, "
                    f"got {type(value).__name__}",
                )


_TOLERATION_FIELDS: Mapping[str, type] = {
    "key": str,
    "operator": str,
    "value": str,
    "effect": str,
    "tolerationSeconds": int,
}


def tolerations_of(spec: Mapping[str, Any]) -> list[Json]:
    tolerations = pod_objects(spec, "tolerations", "spec.tolerations")
    scalar_fields(tolerations, "spec.tolerations", _TOLERATION_FIELDS)
    return tolerations


def node_selector_of(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod_object(spec, "nodeSelector", "spec.nodeSelector")
