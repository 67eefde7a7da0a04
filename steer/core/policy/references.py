"""Names that must be unique, and references to dimensions and taint rules by name, checked on
the raw document so that they are reported together with pydantic's field errors (a typo in one
tenant should not hide a dangling reference in another).

Malformed entries are skipped here: the field validation reports them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from steer.core.policy.issues import PolicyIssue, duplicates

_UNIQUE = ("dimensions", "taints", "tenants", "podClasses", "spread")


def reference_issues(spec: Mapping[str, Any]) -> Iterator[PolicyIssue]:
    """Problems of the raw `spec` mapping, with full paths (`spec.taints[0]...`)."""
    for field in _UNIQUE:
        dups = duplicates(name for _, _, name in _named(spec, field))
        seen: set[str] = set()
        for i, _, name in _named(spec, field):
            if name in dups and name in seen:
                yield PolicyIssue(f"spec.{field}[{i}].name", f"duplicate name {name!r}")
            seen.add(name)

    dim_names = {name for _, _, name in _named(spec, "dimensions")}
    rule_names = {name for _, _, name in _named(spec, "taints")}
    for i, rule, _ in _named(spec, "taints"):
        condition = rule.get("condition")
        dimension = condition.get("dimension") if isinstance(condition, dict) else None
        if isinstance(dimension, str) and dimension not in dim_names:
            yield PolicyIssue(
                f"spec.taints[{i}].condition.dimension",
                f"unknown dimension {dimension!r}; known: {sorted(dim_names)}",
            )
    scoring = spec.get("scoring")
    composite_dims = scoring.get("compositeDimensions") if isinstance(scoring, dict) else None
    for j, name in _strings(composite_dims):
        if name not in dim_names:
            yield PolicyIssue(
                f"spec.scoring.compositeDimensions[{j}]",
                f"unknown dimension {name!r}; known: {sorted(dim_names)}",
            )
    for i, pclass, _ in _named(spec, "podClasses"):
        for j, name in _strings(pclass.get("dimensions")):
            if name not in dim_names:
                yield PolicyIssue(
                    f"spec.podClasses[{i}].dimensions[{j}]", f"unknown dimension {name!r}"
                )
        for j, name in _strings(pclass.get("avoid")):
            if name not in rule_names:
                yield PolicyIssue(
                    f"spec.podClasses[{i}].avoid[{j}]", f"unknown taint rule {name!r}"
                )
    for i, tenant, _ in _named(spec, "tenants"):
        for j, name in _strings(tenant.get("allowedTolerations")):
            if name not in rule_names:
                yield PolicyIssue(
                    f"spec.tenants[{i}].allowedTolerations[{j}]",
                    f"unknown taint rule {name!r}; known: {sorted(rule_names)}",
                )


def _named(spec: Mapping[str, Any], field: str) -> list[tuple[int, Mapping[str, Any], str]]:
    """(index, item, name) of the well-formed entries of a raw list of named objects."""
    items = spec.get(field)
    if not isinstance(items, list):
        return []
    return [
        (i, item, item["name"])
        for i, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    ]


def _strings(value: Any) -> list[tuple[int, str]]:
    if not isinstance(value, list):
        return []
    return [(j, v) for j, v in enumerate(value) if isinstance(v, str)]
