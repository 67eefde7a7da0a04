"""The budget's currency as a ValidatingAdmissionPolicy: the pool and gate requests a pod makes
are checked in the apiserver, so a forged pod cannot take room from a tenant's budget while
the webhook is down (the pool itself: steer/core/budget.py)."""

from __future__ import annotations

from steer.core.admission_policy.cel import (
    cel_list,
    cel_string,
    choose,
    selector_cel,
    tenant_variables,
)
from steer.core.admission_policy.objects import (
    Json,
    not_infrastructure,
    pods_constraints,
    policy_and_binding,
    resource_rule,
)
from steer.core.budget import (
    POOL_KINDS,
    budget_gate,
    enforced,
    former_names,
    gated_levels,
    pool_resource,
    under_prefix,
)
from steer.core.policy import Policy

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
    - any other pod of an opted-in namespace (of no tenant, or of a tenant without a budget)
      may request from the pool, and then at least its limits, and requests no budget gate
      (the webhook and the mutating policy make it request its limits: steer/core/budget.py
      `tenant_budget`; one created while neither was up is not refused, and counts outside
      the pool);
    - a pod of any other namespace, or of an audited tenant, requests neither the pool nor a
      budget gate;
    - a resize (`pods/resize`) of a pod in the pool cannot raise a container's limits above
      what it requests from the pool: it would break the budget after admission.

    Only CREATE and resize are judged: every other pod update leaves resources as they are, and
    judging them would block label and finalizer updates of pods admitted under an older
    policy. Infrastructure (DaemonSet pods made by the DaemonSet controller, mirror pods) is
    outside `matchConditions`. Quantities are compared as floats with half a pool unit of
    slack (a pod's cpu is counted in whole millicores everywhere else anyway)."""
    spec = policy.spec
    # An audited tenant's pods are steered by nothing, so they are outside every budget here
    # (Spec.mode_for).
    budgeted = [t for t in spec.tenants if t.overcommit_percent is not None and not spec.audits(t)]
    pools = [pool_resource(policy, kind) for kind in POOL_KINDS]
    gates = [budget_gate(policy, lv).resource for lv in gated_levels(policy)]
    # Pods admitted under a former resource prefix (an older webhook during an upgrade) carry
    # the same pools and gates by their former names: accepted as the current ones.
    former_pools = former_names(policy, pools)
    former_gates = former_names(policy, gates)
    pool_pairs = [tuple(pools)] + [
        under_prefix(policy, pools, former) for former in spec.former_resource_prefixes
    ]
    all_pools = [*pools, *former_pools]
    all_gates = [*gates, *former_gates]
    currency = [*pools, *gates]
    containers = "variables.containers"
    opted_in = selector_cel(spec.opt_in.namespace_selector, "variables.labels")
    if not enforced(policy) or not budgeted:
        validations: list[Json] = [
            {"expression": "true", "message": f"policy {policy.name} enforces no budget pool"}
        ]
        variables: list[Json] = []
    else:
        tenant_gate = choose(
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
            *tenant_variables(policy),
            {
                "name": "budgeted",
                "expression": "variables.tenant in "
                + cel_list(t.name for t in budgeted)
                + f" && ({opted_in})",
            },
            {
                # Every steered pod shares the pool: those of budgeted tenants, of tenants
                # without a budget and of no tenant (`''`), but not an audited tenant's.
                "name": "pooled",
                "expression": f"!(variables.tenant in {cel_list(policy.spec.audited_tenants())}) "
                f"&& ({opted_in})",
            },
            {"name": "gate", "expression": tenant_gate},
            {
                # The tenant's gate by its current and former names.
                "name": "gateNames",
                "expression": choose(
                    [
                        (
                            f"variables.gate == {cel_string(g)}",
                            cel_list([g, *(f for f, name in former_gates.items() if name == g)]),
                        )
                        for g in gates
                    ],
                    "[]",
                ),
            },
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
            + " || ".join(
                f"({_limit('c', 'cpu')}.asApproximateFloat() * 1000.0 <= "
                f"{_requested('c', cpu)}.asApproximateFloat() + 0.5 && "
                f"{_limit('c', 'memory')}.asApproximateFloat() / 1048576.0 <= "
                f"{_requested('c', memory)}.asApproximateFloat() + 0.5)"
                for cpu, memory in pool_pairs
            )
            + ")"
        )
        member = _holds_any(containers, cel_list(all_pools))
        who = "variables.whose"
        static = [
            f"rule {RULE_CURRENCY}: a pod kube-steer does not steer may not request "
            + ", ".join(currency),
            f"rule {RULE_POOL}: every container of a tenant pod, or of a pod that requests from "
            f"the pool, requests its limits from {cpu_pool} and {mem_pool}, and a resize may "
            "not raise a limit above that",
            f"rule {RULE_CURRENCY}: a tenant pod requests one unit of its budget's gate",
            f"rule {RULE_CURRENCY}: a tenant pod requests no budget gate but its own",
            f"rule {RULE_POOL}: pod-level resources are not counted by the budget pool",
        ]
        validations = [
            {
                # A pod kube-steer does not steer holds none of the budget's currency.
                "expression": f"variables.resize || variables.pooled || !{_holds_any(containers, cel_list([*all_pools, *all_gates]))}",
                "messageExpression": f"'rule {RULE_CURRENCY}: ' + ({who}) + ' is not steered "
                f"by kube-steer (not opted in, or audited), so its pods may not request "
                f"{', '.join(currency)}'",
                "reason": "Forbidden",
            },
            {
                # Every container of a budget pod, or of any pod in the pool, takes its limits
                # from the pool: a pod that requested less would be counted for less.
                "expression": f"!(variables.budgeted || {member}) || {covered}",
                "messageExpression": f"'rule {RULE_POOL}: every container of a pod of ' + ({who}) + "
                f"' requests its cpu and memory limits from {cpu_pool} (millicores) and "
                f"{mem_pool} (MiB); ' + (variables.resize ? 'a resize may not raise a limit "
                "above that (recreate the pod instead)' : 'the kube-steer webhook adds them: is "
                "it running?')",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.resize || !variables.budgeted || variables.gate == '' || "
                f"variables.gateNames.exists(g, {containers}.exists(c, "
                f"{_requested('c', '__GATE__')}.compareTo(quantity('1')) >= 0))".replace(
                    "'__GATE__'", "g"
                ),
                "messageExpression": f"'rule {RULE_CURRENCY}: a pod of ' + ({who}) + ' requests one "
                "unit of ' + variables.gate + ' (the kube-steer webhook adds it: is it running?)'",
                "reason": "Forbidden",
            },
            {
                "expression": "variables.resize || !variables.pooled || !"
                f"{containers}.exists(c, has(c.resources.requests) && c.resources.requests.exists("
                f"k, k in {cel_list(all_gates)} && !(k in variables.gateNames)))",
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
    return policy_and_binding(
        policy,
        name,
        match_constraints=pods_constraints(
            policy,
            [resource_rule(["CREATE"], ["pods"]), resource_rule(["UPDATE"], ["pods/resize"])],
        ),
        match_conditions=not_infrastructure(policy),
        variables=variables,
        validations=validations,
    )
