"""CEL text the admission policies share: literals, label selectors, nested conditionals, and
the namespace's tenant as the webhook picks it.

Every function returns CEL source as a string; `labels` and `var` name CEL expressions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from steer.core.admission_policy.objects import Json
from steer.core.policy import LabelSelector, Policy, SelectorRequirement


def cel_string(text: str) -> str:
    """A CEL string literal (single-quoted, backslash escapes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(cel_string(i) for i in items) + "]"


def _requirement_cel(req: SelectorRequirement, labels: str) -> str:
    present = f"{cel_string(req.key)} in {labels}"
    value = f"{labels}[{cel_string(req.key)}]"
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return f"!({present})"
    if req.operator == "In":
        return f"({present} && {value} in {cel_list(req.values)})"
    return f"(!({present}) || !({value} in {cel_list(req.values)}))"  # NotIn


def selector_cel(selector: LabelSelector, labels: str) -> str:
    """A label selector as a CEL boolean over the map `labels` (empty selector: true)."""
    terms = [
        f"({cel_string(k)} in {labels} && {labels}[{cel_string(k)}] == {cel_string(v)})"
        for k, v in selector.match_labels.items()
    ]
    terms += [_requirement_cel(req, labels) for req in selector.match_expressions]
    return " && ".join(terms) if terms else "true"


def choose(cases: Sequence[tuple[str, str]], otherwise: str) -> str:
    """Nested conditionals: the value of the first case whose condition holds."""
    out = otherwise
    for condition, value in reversed(cases):
        out = f"{condition} ? {value} : ({out})"
    return out


def tenant_variables(policy: Policy) -> list[Json]:
    """`variables.labels`, the namespace's labels, and `variables.tenant`: the first tenant whose
    namespaceSelector matches them, as the webhook picks it (`steer.core.steering.tenant_for`);
    '' for none."""
    return [
        {
            "name": "labels",
            "expression": "has(namespaceObject.metadata.labels) ? "
            "namespaceObject.metadata.labels : {}",
        },
        {
            "name": "tenant",
            "expression": choose(
                [
                    (selector_cel(t.namespace_selector, "variables.labels"), cel_string(t.name))
                    for t in policy.spec.tenants
                ],
                "''",
            ),
        },
    ]
