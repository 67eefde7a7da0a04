"""Kubernetes' own scheduling rules, once: taints and tolerations, node selection, resource sums.

The webhook merges its terms and tolerations with these functions, its validation decides what
a toleration tolerates with them, and `/explain` evaluates the mutated pod with them, so the
three cannot drift apart. Each rule mirrors the kube-scheduler's filter plugins of Kubernetes
1.36 with default feature gates:

- TaintToleration / NodeUnschedulable: `Toleration.ToleratesTaint` (k8s.io/api core/v1). Only
  NoSchedule and NoExecute taints filter; a cordoned node is the taint
  `node.kubernetes.io/unschedulable:NoSchedule`, so a wildcard toleration passes it.
- NodeAffinity: `spec.nodeSelector` ANDed with the required nodeSelectorTerms (ORed; a term
  with no requirement matches nothing); Gt/Lt parse both sides as int64 decimal integers.
- NodeResourcesFit: a pod requests what its containers and sidecars do together, or an init
  container with the sidecars started before it, whichever is more.

Pure: plain mappings in (pods and nodes as the API serves them), booleans and lists out. A pod's
parts are read, and a malformed one named, by steer/core/pod_shape.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from steer.core.pod_shape import Json, requested_resources
from steer.core.quantity import parse_quantity

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"
TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
# PreferNoSchedule only lowers a node's score (TaintToleration's Score, not its Filter).
BLOCKING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
TOLERATION_OPERATORS = (
    "Equal",
    "Exists",
)  # Lt/Gt need the alpha TaintTolerationComparisonOperators
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
NODE_NAME_FIELD = "metadata.name"
UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"

# strconv.ParseInt(s, 10, 64): an optional sign and decimal digits, nothing else (Python's int()
# also takes "1_000" and surrounding blanks, which are valid label values or not integers).
_INT = re.compile(r"[+-]?[0-9]+")
# content.IsDecimalInteger, which Lt/Gt tolerations require of both values: no "+", no leading 0.
_DECIMAL = re.compile(r"0|-?[1-9][0-9]*")
_INT64 = (-(2**63), 2**63 - 1)
# A label value, which every nodeSelectorRequirement value must be (so Gt/Lt take no sign).
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_k8s(cls, obj: Mapping[str, Any]) -> Taint:
        return cls(str(obj.get("key", "")), str(obj.get("value") or ""), str(obj.get("effect", "")))

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    @property
    def blocks(self) -> bool:
        """Whether the scheduler filters a node with this taint for a pod not tolerating it."""
        return self.effect in BLOCKING_EFFECTS

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


UNSCHEDULABLE_TAINT = Taint(UNSCHEDULABLE_KEY, "", NO_SCHEDULE)


def _int64(text: str, pattern: re.Pattern[str] = _INT) -> int | None:
    if not pattern.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64[0] <= value <= _INT64[1] else None


# -- taints and tolerations --------------------------------------------------------------------


def tolerates(
    toleration: Mapping[str, Any], taint: Taint, *, comparison_operators: bool = False
) -> bool:
    """`Toleration.ToleratesTaint`: an empty effect matches every effect, an empty key every
    key (the apiserver allows that only with Exists), Equal (the default) compares values, Exists
    ignores them. Lt/Gt compare int64 values (taint < or > toleration) only with the alpha feature
    gate on, which 1.36 leaves off: then they tolerate nothing, and the apiserver rejects them."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    value = str(toleration.get("value") or "")
    if operator == "Equal":
        return value == taint.value
    if operator == "Exists":
        return True
    if operator in ("Lt", "Gt") and comparison_operators:
        bound, actual = _int64(value, _DECIMAL), _int64(taint.value, _DECIMAL)
        if bound is None or actual is None:
            return False
        return actual < bound if operator == "Lt" else actual > bound
    return False


def tolerated(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def blocking_taints(
    tolerations: Sequence[Mapping[str, Any]], taints: Iterable[Taint], *, unschedulable: bool
) -> tuple[Taint, ...]:
    """The taints that keep a pod with these tolerations off a node (TaintToleration and
    NodeUnschedulable filters); empty when the node is feasible as far as taints go."""
    found = [t for t in taints if t.blocks and not tolerated(tolerations, t)]
    if unschedulable and not tolerated(tolerations, UNSCHEDULABLE_TAINT):
        found.append(UNSCHEDULABLE_TAINT)
    return tuple(found)


def toleration_problems(tolerations: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """Why the apiserver would refuse these tolerations (its validation, default feature gates);
    empty when it accepts them. A refused pod is never scheduled anywhere."""
    out = []
    for i, tol in enumerate(tolerations):
        where = f"spec.tolerations[{i}]"
        operator = tol.get("operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            out.append(
                f"{where}.operator: {operator!r} is not supported (Equal or Exists; Lt/Gt need "
                "the alpha feature gate TaintTolerationComparisonOperators)"
            )
        if not tol.get("key") and operator != "Exists":
            out.append(f"{where}.operator: must be Exists when key is empty")
        if operator == "Exists" and tol.get("value"):
            out.append(f"{where}.value: must be empty when operator is Exists")
        effect = tol.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            out.append(f"{where}.effect: {effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        if tol.get("tolerationSeconds") is not None and effect != NO_EXECUTE:
            out.append(f"{where}.effect: must be NoExecute when tolerationSeconds is set")
    return tuple(out)


def selector_problems(terms: Sequence[Mapping[str, Any]] | None, field: str) -> tuple[str, ...]:
    """Why the apiserver would refuse these required nodeSelectorTerms; empty when it accepts
    them (Gt/Lt values that are not integers pass validation and match no node)."""
    if terms is None:
        return ()
    if not terms:
        return (f"{field}: must have at least one node selector term",)
    out = []
    for i, term in enumerate(terms):
        for j, expr in enumerate(term.get("matchExpressions") or ()):
            where = f"{field}[{i}].matchExpressions[{j}]"
            op, values = expr.get("operator"), expr.get("values") or ()
            if op not in SELECTOR_OPERATORS:
                out.append(
                    f"{where}.operator: {op!r} is not one of {', '.join(SELECTOR_OPERATORS)}"
                )
            elif op in ("In", "NotIn") and not values:
                out.append(f"{where}.values: must be set when operator is {op}")
            elif op in ("Exists", "DoesNotExist") and values:
                out.append(f"{where}.values: must be empty when operator is {op}")
            elif op in ("Gt", "Lt") and len(values) != 1:
                out.append(f"{where}.values: must hold one value when operator is {op}")
            out += [
                f"{where}.values: {v!r} is not a valid label value"
                for v in values
                if not (isinstance(v, str) and len(v) <= 63 and _LABEL_VALUE.fullmatch(v))
            ]
        for j, expr in enumerate(term.get("matchFields") or ()):
            where = f"{field}[{i}].matchFields[{j}]"
            if expr.get("key") != NODE_NAME_FIELD:
                out.append(f"{where}.key: only {NODE_NAME_FIELD} is supported")
            if expr.get("operator") not in FIELD_OPERATORS:
                out.append(f"{where}.operator: must be In or NotIn")
            elif len(expr.get("values") or ()) != 1:
                out.append(f"{where}.values: must hold exactly one node name")
    return tuple(out)


def toleration_id(tol: Mapping[str, Any]) -> tuple[Any, ...]:
    """A toleration with its defaults filled in, for telling equal tolerations apart."""
    return (
        tol.get("key") or "",
        tol.get("operator") or "Equal",
        tol.get("value") or "",
        tol.get("effect") or "",
        tol.get("tolerationSeconds"),
    )


def missing_tolerations(
    tolerations: Sequence[Mapping[str, Any]], wanted: Iterable[Json]
) -> list[Json]:
    """The tolerations of `wanted` the pod does not carry yet (appending them is idempotent)."""
    have = {toleration_id(t) for t in tolerations}
    return [t for t in wanted if toleration_id(t) not in have]


# -- node selection ------------------------------------------------------------------------------


def expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """One nodeSelectorRequirement against a node's labels (In/NotIn/Exists/DoesNotExist/Gt/Lt).

    NotIn and DoesNotExist match a node without the label. Gt/Lt need exactly one value and
    both sides integers; otherwise (as for an unknown operator, which the apiserver refuses)
    nothing matches."""
    key = expr.get("key")
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    value = labels.get(key) if isinstance(key, str) else None
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        node_value, bound = _int64(value), _int64(values[0])
        if node_value is None or bound is None:
            return False
        return node_value > bound if op == "Gt" else node_value < bound
    return False


def field_matches(expr: Mapping[str, Any], node_name: str) -> bool:
    """One matchFields requirement: only `metadata.name` with In/NotIn exists."""
    if expr.get("key") != NODE_NAME_FIELD:
        return False
    values = [str(v) for v in expr.get("values") or ()]
    op = expr.get("operator")
    if op == "In":
        return node_name in values
    if op == "NotIn":
        return node_name not in values
    return False


def term_matches(term: Mapping[str, Any], labels: Mapping[str, str], node_name: str = "") -> bool:
    """A nodeSelectorTerm matches when all its matchExpressions and matchFields do.

    A term with no requirements at all matches no node: that is the scheduler's rule, and an
    affinity merge that filled such a term would widen the user's constraint.
    """
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    return all(expression_matches(e, labels) for e in exprs) and all(
        field_matches(f, node_name) for f in fields
    )


def node_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """`spec.nodeSelector`: every key present with exactly that value."""
    return all(labels.get(k) == str(v) for k, v in selector.items())


def terms_match(
    terms: Sequence[Mapping[str, Any]] | None, labels: Mapping[str, str], node_name: str = ""
) -> bool:
    """Required nodeSelectorTerms (ORed); None means the pod sets none and every node passes."""
    if terms is None:
        return True
    return any(term_matches(t, labels, node_name) for t in terms)


def merge_required(
    terms: Sequence[Json] | None, alternatives: Sequence[Sequence[Json]]
) -> list[Json] | None:
    """AND one rule (alternatives ORed) into ORed nodeSelectorTerms; None means no constraint.

    Terms are ORed, so a rule with alternatives (A or B) turns each term T into T+A and T+B. A
    term that already holds one alternative is left alone (that keeps the merge idempotent),
    and a term with no requirement matches no node and stays that way.
    """
    if terms is None:
        return [{"matchExpressions": list(alt)} for alt in alternatives]
    wanted = [frozenset(_expr_id(e) for e in alt) for alt in alternatives]
    out: list[Json] = []
    for term in terms:
        exprs = term.get("matchExpressions") or []
        if not exprs and not term.get("matchFields"):
            out.append(term)  # matches no node; filling it would widen the user's constraint
            continue
        have = {_expr_id(e) for e in exprs}
        if any(alt <= have for alt in wanted):
            out.append(term)  # already holds one alternative: ANDing it again changes nothing
        else:
            out.extend({**term, "matchExpressions": [*exprs, *alt]} for alt in alternatives)
    return out


def _expr_id(expr: Mapping[str, Any]) -> tuple[Any, Any, tuple[str, ...]]:
    return (expr.get("key"), expr.get("operator"), tuple(expr.get("values") or ()))


# -- resource sums -------------------------------------------------------------------------------


def _amount(resources: Mapping[str, Any], part: str, name: str) -> int | Fraction | None:
    values = resources.get(part)
    if not isinstance(values, Mapping) or values.get(name) is None:
        return None
    value = parse_quantity(values[name])
    # Whole amounts (most: pods ask whole devices, bytes, cores) are summed as ints, which is
    # several times cheaper than Fraction arithmetic.
    return value.numerator if value.denominator == 1 else value


def _container_amount(container: Mapping[str, Any], part: str, name: str) -> int | Fraction:
    resources = container.get("resources") or {}
    value = _amount(resources, part, name)
    if value is None:
        value = _amount(resources, "limits" if part == "requests" else "requests", name)
    return 0 if value is None else value


def container_amount(container: Mapping[str, Any], part: str, name: str) -> Fraction:
    """One container's request (defaulting to its limit, as the apiserver does) or limit
    (defaulting to its request: an unbounded container is priced at what it asked for)."""
    return Fraction(_container_amount(container, part, name))


def pod_amount(spec: Mapping[str, Any], part: str, name: str) -> Fraction:
    """A pod's request (or limit) of one resource as the scheduler sums it: the containers and
    the restartable init containers (sidecars) that run beside them, or an ordinary init
    container with the sidecars started before it, whichever is larger. Raises QuantityError
    for a malformed quantity."""
    sidecars: int | Fraction = 0
    init_peak: int | Fraction = 0
    for container in spec.get("initContainers") or ():
        value = _container_amount(container, part, name)
        if container.get("restartPolicy") == "Always":
            sidecars += value
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + value)
    total: int | Fraction = 0
    for container in spec.get("containers") or ():
        total += _container_amount(container, part, name)
    return Fraction(max(total + sidecars, init_peak))


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """Every resource the pod requests, as NodeResourcesFit sums it (in the resource's unit)."""
    return {name: pod_amount(spec, "requests", name) for name in sorted(requested_resources(spec))}
