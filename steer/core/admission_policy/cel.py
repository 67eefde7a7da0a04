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


def cel_empty_list(item: str) -> str:
    """An empty list typed as a list of the CEL expression `item`'s type. The apiserver checks
    list and map literals as homogeneous (every element of exactly one type, and `dyn` is not
    `string`), and a variable that holds `[]` is a `list(dyn)`: an element of it placed in a
    literal beside a string does not compile, where an element of this list does."""
    return f"[{item}].filter(x, false)"


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


class Cel(str):
    """CEL source to be placed as is inside a value `cel_value` renders."""


def cel_value(value: object) -> str:
    """A JSON value as a CEL literal. Map values and list items of mixed types are wrapped in
    `dyn()`: CEL's checker gives a map literal one value type (`{"weight": 10, "preference":
    {...}}` does not compile), and JSONPatch values accept maps of `dyn`. `Cel` text is placed
    as is."""
    if isinstance(value, Cel):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return cel_string(value)
    if isinstance(value, dict):
        wrap = not all(isinstance(v, str) and not isinstance(v, Cel) for v in value.values())
        items = (
            f"{cel_string(k)}: " + (f"dyn({cel_value(v)})" if wrap else cel_value(v))
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list | tuple):
        wrap = not all(isinstance(v, str) and not isinstance(v, Cel) for v in value)
        return (
            "[" + ", ".join(f"dyn({cel_value(v)})" if wrap else cel_value(v) for v in value) + "]"
        )
    raise TypeError(f"no CEL literal for {type(value).__name__}")
