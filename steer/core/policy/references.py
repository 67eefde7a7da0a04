"""Names that must be unique, and references to dimensions, taint rules and tenants by name,
checked on the raw document so that they are reported together with pydantic's field errors (a
typo in one tenant should not hide a dangling reference in another).

Malformed entries are skipped here: the field validation reports them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from steer.core.policy.issues import PolicyIssue, duplicates

_UNIQUE = ("dimensions", "taints", "tenants", "podClasses", "spread")
_BOOL = TypeAdapter(bool)


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
    class_names = {name for _, _, name in _named(spec, "podClasses")}
    for i, dim, _ in _named(spec, "dimensions"):
        coverage = dim.get("coverage")
        pod_class = coverage.get("podClass") if isinstance(coverage, dict) else None
        if isinstance(pod_class, str) and pod_class not in class_names:
            yield PolicyIssue(
                f"spec.dimensions[{i}].coverage.podClass",
                f"unknown pod class {pod_class!r}; known: {sorted(class_names)}",
            )
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
    section = spec.get("clusterScores")
    if isinstance(section, dict):
        yield from _cluster_score_issues(spec, section, dim_names)


def _cluster_score_issues(
    spec: Mapping[str, Any], section: Mapping[str, Any], dim_names: set[str]
) -> Iterator[PolicyIssue]:
    """Score names are unique; the tenants and dimensions the scores name exist when the
    section is enabled (a disabled one may name what is not there yet), and a tenant's
    headroom needs its budget."""
    base = "spec.clusterScores.scores"
    scores = _named(section, "scores")
    dups = duplicates(name for _, _, name in scores)
    tenants = {name: tenant for _, tenant, name in _named(spec, "tenants")}
    enabled = _flag(section.get("enabled", False))
    for i, score, name in scores:
        if name in dups:
            yield PolicyIssue(f"{base}[{i}].name", f"duplicate score name {name!r}")
        tenant, dimension = score.get("tenant"), score.get("dimension")
        if score.get("kind") == "tenantHeadroom" and isinstance(tenant, str):
            if tenant not in tenants and enabled:
                yield PolicyIssue(
                    f"{base}[{i}].tenant", f"unknown tenant {tenant!r}; known: {sorted(tenants)}"
                )
            elif tenant in tenants and tenants[tenant].get("overcommitPercent") is None:
                yield PolicyIssue(
                    f"{base}[{i}].tenant",
                    f"tenant {tenant!r} has no overcommitPercent: its headroom is "
                    "measured against its budget",
                )
        if (
            score.get("kind") == "powerPerCore"
            and isinstance(dimension, str)
            and dimension not in dim_names
            and enabled
        ):
            yield PolicyIssue(
                f"{base}[{i}].dimension",
                f"unknown dimension {dimension!r}; known: {sorted(dim_names)}",
            )


def _flag(value: Any) -> bool:
    """A raw boolean as the model reads it (false where it is not one: a field error)."""
    try:
        return _BOOL.validate_python(value)
    except ValidationError:
        return False


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
