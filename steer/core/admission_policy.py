"""The policy's security rules as a ValidatingAdmissionPolicy the apiserver enforces itself.

A taint rule marked `security: true` reserves its taint: only namespaces of a tenant whose
`allowedTolerations` names the rule may run pods that tolerate it. That is the one rule worth
failing closed for, and a webhook can only fail closed by refusing every pod it cannot judge,
so a down webhook would stop pod creation in every namespace it selects. The same rule written
in CEL (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) is evaluated inside the
apiserver and holds with no kube-steer pod running; the webhooks can then all fail open.

Pure: policy in, two Kubernetes objects (as JSON-ready dicts) out. The CEL mirrors the
webhook's `reserved-toleration` rule (steer/core/admission.py) exactly, and the end-to-end suite
compares the two verdicts on the real apiserver:
- the namespace's tenant is the first tenant whose namespaceSelector matches its labels
  (`steer.core.steering.tenant_for`), read from `namespaceObject.metadata.labels`;
- a toleration tolerates a taint as the scheduler decides it: an empty effect matches every
  effect, an empty key every key (`operator: Exists` with no key tolerates everything),
  `Exists` ignores the value, `Equal` (or no operator) compares it, anything else does not
  match;
- on UPDATE only tolerations the old pod did not have are judged, so a pod admitted under an
  older policy can still be updated;
- namespaces the webhook never validates (kube-system, the project namespace,
  `optIn.excludedNamespaces`) are outside `matchConstraints`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from steer.core.budget import POOL_KINDS, budget_gate, enforced, gated_levels, pool_resource
from steer.core.infrastructure import exempt_cel
from steer.core.policy import (
    LabelSelector,
    Policy,
    SelectorRequirement,
)
from steer.core.steering import CONDITION_VALUE, condition_key
from steer.core.steering import excluded_namespace_list as excluded_namespaces

DEFAULT_NAME = "steer-security"
API_VERSION = "admissionregistration.k8s.io/v1"
RULE_TOLERATION = "reserved-toleration"  # the webhook's rule name, so denials read the same
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

Json = dict[str, Any]


@dataclass(frozen=True)
class SecurityTaint:
    """One reserved taint the admission policy protects, and who may tolerate it."""

    rule: str
    key: str
    value: str
    effect: str
    allowed_tenants: tuple[str, ...]


def security_taints(policy: Policy) -> tuple[SecurityTaint, ...]:
    return tuple(
        SecurityTaint(
            rule=rule.name,
            key=condition_key(policy, rule),
            value=CONDITION_VALUE,
            effect=rule.effect,
            allowed_tenants=tuple(
                t.name for t in policy.spec.tenants if rule.name in t.allowed_tolerations
            ),
        )
        for rule in policy.spec.taints
        if rule.security
    )


# --- CEL text ----------------------------------------------------------------------------------


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


TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def normalized_tolerations(tolerations: str) -> str:
    """The list `tolerations` as maps with all four fields, '' where a field is unset, so the
    rules below read like the webhook's (`toleration.get("key") or ""`)."""
    fields = ", ".join(f"'{f}': has(t.{f}) ? t.{f} : ''" for f in TOLERATION_FIELDS)
    return f"{tolerations}.map(t, {{{fields}}})"


def toleration_described(var: str) -> str:
    """`{key=..., operator=..., value=..., effect=...}` with empty fields left out, as the
    webhook writes it: the identity of a toleration across an UPDATE, and the denial text."""
    parts = " + ".join(
        f"({var}.{f} != '' ? [{cel_string(f + '=')} + {var}.{f}] : [])" for f in TOLERATION_FIELDS
    )
    return f"'{{' + ({parts}).join(', ') + '}}'"


def tolerates_cel(var: str, taint: SecurityTaint) -> str:
    """The scheduler's ToleratesTaint for the normalized toleration `var` and one taint."""
    return (
        f"({var}.effect == '' || {var}.effect == {cel_string(taint.effect)})"
        f" && ({var}.key == '' || {var}.key == {cel_string(taint.key)})"
        f" && ({var}.operator == 'Exists'"
        f" || ({var}.operator in ['', 'Equal'] && {var}.value == {cel_string(taint.value)}))"
    )


def _choose(cases: Sequence[tuple[str, str]], otherwise: str) -> str:
    """Nested conditionals: the value of the first case whose condition holds."""
    out = otherwise
    for condition, value in reversed(cases):
        out = f"{condition} ? {value} : ({out})"
    return out


# --- objects -----------------------------------------------------------------------------------


def _resource_rule(
    operations: Sequence[str], resources: Sequence[str], scope: str = "Namespaced"
) -> Json:
    """One `matchConstraints.resourceRules` entry of the core API group (v1)."""
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": list(operations),
        "resources": list(resources),
        "scope": scope,
    }


def _pods_constraints(policy: Policy, rules: Sequence[Json]) -> Json:
    """`matchConstraints` for pod requests in every namespace the webhook validates."""
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": NAMESPACE_NAME_LABEL,
                    "operator": "NotIn",
                    "values": list(excluded_namespaces(policy)),
                }
            ]
        },
        "resourceRules": list(rules),
        "matchPolicy": "Equivalent",
    }


def _not_infrastructure(policy: Policy) -> list[Json]:
    """DaemonSet pods (node-exporter, CNI, CSI, GPU operator: `operator: Exists` tolerations)
    and mirror pods are infrastructure: never refused."""
    return [{"name": "not-infrastructure", "expression": f"!({exempt_cel(policy)})"}]


def _policy_and_binding(
    policy: Policy,
    name: str,
    *,
    match_constraints: Json,
    match_conditions: list[Json],
    variables: list[Json],
    validations: list[Json],
) -> tuple[Json, Json]:
    """A ValidatingAdmissionPolicy and the binding that denies what it does not validate, both
    named `name` and annotated with the policy version they were made from."""
    metadata = {
        "name": name,
        "labels": {"app.kubernetes.io/part-of": "kube-steer"},
        "annotations": {policy.label_key("policy-version"): policy.version},
    }
    vap: Json = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": dict(metadata),
        "spec": {
            # Fail: an expression error (never expected) refuses the request rather than let
            # through what the rules guard (a reserved toleration, a forged pod, a node write).
            "failurePolicy": "Fail",
            "matchConstraints": match_constraints,
            "matchConditions": match_conditions,
            "variables": variables,
            "validations": validations,
        },
    }
    binding: Json = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return vap, binding


# --- the security rules ------------------------------------------------------------------------


def _variables(policy: Policy) -> list[Json]:
    tenants = policy.spec.tenants
    described = toleration_described("t")
    return [
        {
            "name": "labels",
            "expression": "has(namespaceObject.metadata.labels) ? "
            "namespaceObject.metadata.labels : {}",
        },
        {
            # The first tenant whose selector matches, as the webhook picks it; '' for none.
            "name": "tenant",
            "expression": _choose(
                [
                    (selector_cel(t.namespace_selector, "variables.labels"), cel_string(t.name))
                    for t in tenants
                ],
                "''",
            ),
        },
        {
            # What the denial says the tenant may tolerate (every rule it may, as the webhook).
            "name": "mayTolerate",
            "expression": _choose(
                [
                    (
                        f"variables.tenant == {cel_string(t.name)}",
                        cel_string(", ".join(sorted(set(t.allowed_tolerations))) or "none"),
                    )
                    for t in tenants
                ],
                "'none'",
            ),
        },
        {
            "name": "who",
            "expression": "variables.tenant == '' ? 'namespace \"' + "
            "namespaceObject.metadata.name + '\" (in no tenant)' : 'tenant \"' + "
            "variables.tenant + '\" (namespace \"' + namespaceObject.metadata.name + '\")'",
        },
        {
            # The old pod's tolerations (UPDATE), described: these are not judged again.
            "name": "oldTolerations",
            "expression": "request.operation == 'UPDATE' && oldObject != null && "
            "has(oldObject.spec.tolerations) ? "
            f"{normalized_tolerations('oldObject.spec.tolerations')}.map(t, {described}) : []",
        },
        {
            # The tolerations to judge: on UPDATE only those the old pod did not have.
            "name": "tolerations",
            "expression": "has(object.spec.tolerations) ? "
            f"{normalized_tolerations('object.spec.tolerations')}.filter(t, "
            f"!({described} in variables.oldTolerations)) : []",
        },
    ]


def _validation(taint: SecurityTaint) -> Json:
    tolerating = f"variables.tolerations.exists(t, {tolerates_cel('t', taint)})"
    expression = f"!{tolerating}"
    if taint.allowed_tenants:
        expression = f"variables.tenant in {cel_list(taint.allowed_tenants)} || {expression}"
    # The first offending toleration, described; map() binds it to `t` once.
    offending = (
        f"variables.tolerations.filter(t, {tolerates_cel('t', taint)}).map(t, "
        f"{toleration_described('t')} + (t.key == '' ? "
        "' (an empty key tolerates every taint)' : ''))[0]"
    )
    reserved = f"{taint.key}={taint.value}:{taint.effect}"
    message = (
        f"{cel_string(f'rule {RULE_TOLERATION}: spec.tolerations ')} + {offending} + "
        f"{cel_string(f' tolerates the taint {reserved} reserved by taint rule ')} + "
        f"{cel_string(chr(34) + taint.rule + chr(34) + '; ')} + variables.who + "
        "' may tolerate only: ' + variables.mayTolerate"
    )
    allowed = ", ".join(taint.allowed_tenants) or "none"
    return {
        "expression": expression,
        "message": (
            f"rule {RULE_TOLERATION}: a toleration of {reserved}, reserved by taint rule "
            f'"{taint.rule}" (security), is allowed only in namespaces of tenants: {allowed}'
        ),
        "messageExpression": message,
        "reason": "Forbidden",
    }


def security_admission_policy(policy: Policy, name: str = DEFAULT_NAME) -> tuple[Json, Json]:
    """The ValidatingAdmissionPolicy and its binding for `policy`'s security taint rules.

    A policy without security rules still gets both objects (one validation that always
    holds), so applying the output after any policy change replaces the previous rules."""
    taints = security_taints(policy)
    validations = [_validation(t) for t in taints] or [
        {
            "expression": "true",
            "message": f"policy {policy.name} has no security taint rules",
        }
    ]
    return _policy_and_binding(
        policy,
        name,
        match_constraints=_pods_constraints(
            policy, [_resource_rule(["CREATE", "UPDATE"], ["pods"])]
        ),
        match_conditions=_not_infrastructure(policy),
        # Variables are evaluated only when a validation reads them.
        variables=_variables(policy) if taints else [],
        validations=validations,
    )


# --- the budget's currency ---------------------------------------------------------------------

BUDGET_POLICY_NAME = "steer-budget"
RULE_POOL = "budget-pool"
RULE_CURRENCY = "budget-currency"


def _requested(container: str, name: str) -> str:
    """CEL: what `container` requests of `name`, as a quantity (0 when it does not)."""
    return (
        f"(has({container}.resources.requests) && {cel_string(name)} in "
        f"{container}.resources.requests ? quantity({container}.resources.requests"
        f"[{cel_string(name)}]) : quantity('0'))"
    )


def _limit(container: str, resource: str) -> str:
    """CEL: the container's limit of `resource`, or its request without one (as the pool
    counts it), as a quantity."""
    key = cel_string(resource)
    return (
        f"(has({container}.resources.limits) && {key} in {container}.resources.limits ? "
        f"quantity({container}.resources.limits[{key}]) : {_requested(container, resource)})"
    )


def _holds_any(containers: str, names: str) -> str:
    return (
        f"{containers}.exists(c, has(c.resources.requests) && "
        f"c.resources.requests.exists(k, k in {names}))"
    )


def budget_admission_policy(policy: Policy, name: str = BUDGET_POLICY_NAME) -> tuple[Json, Json]:
    """The ValidatingAdmissionPolicy and binding that guard the budget's currency in the
    apiserver, webhook up or down (steer/core/budget.py):

    - a pod of a tenant with a budget, in an opted-in namespace, requests from the pool at
      least its limits, container by container (init containers and sidecars too), and the
      gate of its own budget (below the highest level) and of no other;
    - a pod of any other namespace requests neither the pool nor a budget gate;
    - a resize (`pods/resize`) of a pod in the pool cannot raise a container's limits above
      what it requests from the pool: it would break the budget after admission.

    Only CREATE and resize are judged: every other pod update leaves resources as they are, and
    judging them would block label and finalizer updates of pods admitted under an older
    policy. Infrastructure (DaemonSet pods made by the DaemonSet controller, mirror pods) is
    outside `matchConditions`. Quantities are compared as floats with half a pool unit of
    slack (a pod's cpu is counted in whole millicores everywhere else anyway)."""
    spec = policy.spec
    budgeted = [t for t in spec.tenants if t.overcommit_percent is not None]
    pools = [pool_resource(policy, kind) for kind in POOL_KINDS]
    gates = [budget_gate(policy, lv).resource for lv in gated_levels(policy)]
    currency = [*pools, *gates]
    containers = "variables.containers"
    if not enforced(policy) or not budgeted:
        validations: list[Json] = [
            {"expression": "true", "message": f"policy {policy.name} enforces no budget pool"}
        ]
        variables: list[Json] = []
    else:
        tenant_gate = _choose(
            [
                (
                    f"variables.tenant == {cel_string(t.name)}",
                    cel_string(
                        budget_gate(policy, t.overcommit_percent).resource
                        if t.overcommit_percent is not None
                        and t.overcommit_percent in gated_levels(policy)
                        else ""
                    ),
                )
                for t in budgeted
            ],
            "''",
        )
        variables = [
            *_variables(policy)[:2],  # labels, tenant
            {
                "name": "budgeted",
                "expression": "variables.tenant in "
                + cel_list(t.name for t in budgeted)
                + " && ("
                + selector_cel(spec.opt_in.namespace_selector, "variables.labels")
                + ")",
            },
            {"name": "gate", "expression": tenant_gate},
            {
                "name": "containers",
                "expression": "object.spec.containers + (has(object.spec.initContainers) ? "
                "object.spec.initContainers : [])",
            },
            {
                "name": "resize",
                "expression": "has(request.subResource) && request.subResource == 'resize'",
            },
            {
                "name": "whose",
                "expression": "variables.tenant == '' ? 'namespace \"' + "
                "namespaceObject.metadata.name + '\"' : 'tenant \"' + variables.tenant + '\"'",
            },
        ]
        cpu_pool, mem_pool = pools
        covered = (
            f"{containers}.all(c, "
            f"{_limit('c', 'cpu')}.asApproximateFloat() * 1000.0 <= "
            f"{_requested('c', cpu_pool)}.asApproximateFloat() + 0.5 && "
            f"{_limit('c', 'memory')}.asApproximateFloat() / 1048576.0 <= "
            f"{_requested('c', mem_pool)}.asApproximateFloat() + 0.5)"
        )
        member = _holds_any(containers, cel_list(pools))
        who = "variables.whose"
        static = [
            f"rule {RULE_CURRENCY}: a pod outside every budget may not request "
            + ", ".join(currency),
            f"rule {RULE_POOL}: every container of a tenant pod requests its limits from "
            f"{cpu_pool} and {mem_pool}, and a resize may not raise a limit above that",
            f"rule {RULE_CURRENCY}: a tenant pod requests one unit of its budget's gate",
            f"rule {RULE_CURRENCY}: a tenant pod requests no budget gate but its own",
            f"rule {RULE_POOL}: pod-level resources are not counted by the budget pool",
        ]
        validations = [
            {
                # A pod outside every budget holds none of the budget's currency.
                "expression": f"variables.resize || variables.budgeted || !{_holds_any(containers, cel_list(currency))}",
                "messageExpression": f"'rule {RULE_CURRENCY}: ' + ({who}) + ' has no budget, so "
                f"its pods may not request {', '.join(currency)}'",
                "reason": "Forbidden",
            },
            {
                # Every container of a budget pod takes its limits from the pool.
                "expression": f"!(variables.budgeted || (variables.resize && {member})) || {covered}",
                "messageExpression": f"'rule {RULE_POOL}: every container of a pod of ' + ({who}) + "
                f"' requests its cpu and memory limits from {cpu_pool} (millicores) and "
                f"{mem_pool} (MiB); ' + (variables.resize ? 'a resize may not raise a limit "
                "above that (recreate the pod instead)' : 'the kube-steer webhook adds them: is "
                "it running?')",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.resize || !variables.budgeted || variables.gate == '' || "
                f"{containers}.exists(c, {_requested('c', '__GATE__')}.compareTo(quantity('1')) >= 0)".replace(
                    "'__GATE__'", "variables.gate"
                ),
                "messageExpression": f"'rule {RULE_CURRENCY}: a pod of ' + ({who}) + ' requests one "
                "unit of ' + variables.gate + ' (the kube-steer webhook adds it: is it running?)'",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.resize || !variables.budgeted || !"
                f"{containers}.exists(c, has(c.resources.requests) && c.resources.requests.exists("
                f"k, k in {cel_list(gates)} && k != variables.gate))",
                "messageExpression": f"'rule {RULE_CURRENCY}: a pod of ' + ({who}) + ' may request "
                "no budget gate but ' + (variables.gate == '' ? 'none' : variables.gate)",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.resize || !variables.budgeted || !has(object.spec.resources)",
                "messageExpression": f"'rule {RULE_POOL}: pod-level resources (spec.resources) are "
                "not counted by the budget pool; set them per container in a pod of ' + ("
                f"{who})",
                "reason": "Forbidden",
            },
        ]
        for validation, message in zip(validations, static, strict=True):
            validation["message"] = message  # if the messageExpression fails
    return _policy_and_binding(
        policy,
        name,
        match_constraints=_pods_constraints(
            policy,
            [_resource_rule(["CREATE"], ["pods"]), _resource_rule(["UPDATE"], ["pods/resize"])],
        ),
        match_conditions=_not_infrastructure(policy),
        variables=variables,
        validations=validations,
    )


# --- the scorer's own node writes --------------------------------------------------------------

NODE_WRITES_POLICY_NAME = "steer-scorer-node-writes"
RULE_NODE_WRITES = "scorer-owned-keys"
# Release 0.1.0's label prefix: its keys are retired by the first cycle of a newer scorer.
LEGACY_PREFIXES = ("steer.io/",)


def scorer_username(policy: Policy) -> str:
    """The identity the scorer runs as (manifests/scorer/scorer.yaml)."""
    return f"system:serviceaccount:{policy.spec.project_namespace}:steer-scorer"


def node_writes_admission_policy(
    policy: Policy,
    username: str | None = None,
    *,
    also_prefixes: Sequence[str] = (),
    name: str = NODE_WRITES_POLICY_NAME,
) -> tuple[Json, Json]:
    """The ValidatingAdmissionPolicy and binding that confine the scorer's Node writes, in the
    apiserver, to keys it owns: labels, annotations and taints under the label prefix (or an
    earlier one it retires: `also_prefixes`, 0.1.0's `steer.io/`), resources in
    `status.capacity`/`allocatable` under the resource or label prefix. Nothing else of a Node
    may change in its writes, so a bug or a stolen token cannot relabel, taint (a NoExecute
    taint evicts) or drain a node outside the policy."""
    prefixes = list(
        dict.fromkeys(
            [spec_prefix for spec_prefix in (policy.spec.label_prefix, policy.spec.resource_prefix)]
            + list(LEGACY_PREFIXES)
            + list(also_prefixes)
        )
    )
    owned = cel_list(prefixes)

    def own(var: str) -> str:
        return f"{owned}.exists(p, {var}.startsWith(p))"

    def same_foreign_keys(old: str, new: str) -> str:
        return (
            f"{new}.all(k, {own('k')} || (k in {old} && {old}[k] == {new}[k])) && "
            f"{old}.all(k, {own('k')} || k in {new})"
        )

    def field_map(obj: str, path: str) -> str:
        return f"({obj}.{path.rsplit('.', 1)[0]}.?{path.rsplit('.', 1)[1]}.orValue({{}}))"

    variables = [
        {"name": "oldLabels", "expression": field_map("oldObject", "metadata.labels")},
        {"name": "newLabels", "expression": field_map("object", "metadata.labels")},
        {"name": "oldAnnotations", "expression": field_map("oldObject", "metadata.annotations")},
        {"name": "newAnnotations", "expression": field_map("object", "metadata.annotations")},
        {"name": "oldTaints", "expression": "oldObject.spec.?taints.orValue([])"},
        {"name": "newTaints", "expression": "object.spec.?taints.orValue([])"},
        {"name": "oldCapacity", "expression": field_map("oldObject", "status.capacity")},
        {"name": "newCapacity", "expression": field_map("object", "status.capacity")},
        {"name": "oldAllocatable", "expression": field_map("oldObject", "status.allocatable")},
        {"name": "newAllocatable", "expression": field_map("object", "status.allocatable")},
    ]
    what = f"keys under {', '.join(prefixes)}"
    checks = [
        ("labels", same_foreign_keys("variables.oldLabels", "variables.newLabels")),
        ("annotations", same_foreign_keys("variables.oldAnnotations", "variables.newAnnotations")),
        (
            "taints",
            f"variables.newTaints.filter(t, !{own('t.key')}) == "
            f"variables.oldTaints.filter(t, !{own('t.key')})",
        ),
        (
            "spec",
            " && ".join(
                f"object.spec.?{f} == oldObject.spec.?{f}"
                for f in ("unschedulable", "podCIDR", "podCIDRs", "providerID")
            ),
        ),
        (
            "status.capacity and status.allocatable",
            same_foreign_keys("variables.oldCapacity", "variables.newCapacity")
            + " && "
            + same_foreign_keys("variables.oldAllocatable", "variables.newAllocatable"),
        ),
        (
            "status",
            " && ".join(
                f"object.status.?{f} == oldObject.status.?{f}"
                for f in ("conditions", "addresses", "nodeInfo", "daemonEndpoints")
            ),
        ),
        (
            "metadata",
            " && ".join(
                f"object.metadata.?{f} == oldObject.metadata.?{f}"
                for f in ("finalizers", "ownerReferences")
            ),
        ),
    ]
    validations = [
        {
            "expression": expression,
            "message": f"rule {RULE_NODE_WRITES}: the kube-steer scorer may change only {what} of "
            f"a Node's {part}",
            "reason": "Forbidden",
        }
        for part, expression in checks
    ]
    return _policy_and_binding(
        policy,
        name,
        match_constraints={
            "resourceRules": [
                _resource_rule(["UPDATE"], ["nodes", "nodes/status"], scope="Cluster")
            ],
            "matchPolicy": "Equivalent",
        },
        match_conditions=[
            {
                "name": "the-scorer",
                "expression": "request.userInfo.username == "
                + cel_string(username or scorer_username(policy)),
            }
        ],
        variables=variables,
        validations=validations,
    )


def admission_policies(
    policy: Policy,
    *,
    security_name: str = DEFAULT_NAME,
    scorer_user: str | None = None,
    also_prefixes: Sequence[str] = (),
) -> list[Json]:
    """Every object `steer policy admission-policy` writes: the security rules, the budget's
    currency and the scorer's node writes, each a policy and its binding."""
    out: list[Json] = []
    out += security_admission_policy(policy, security_name)
    out += budget_admission_policy(policy)
    out += node_writes_admission_policy(policy, scorer_user, also_prefixes=also_prefixes)
    return out
