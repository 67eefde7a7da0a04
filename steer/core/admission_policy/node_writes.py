"""The scorer's own Node writes, confined by a ValidatingAdmissionPolicy to the keys it owns, so
a bug or a stolen token of the scorer's service account cannot change the rest of a Node."""

from __future__ import annotations

from collections.abc import Sequence

from steer.core.admission_policy.cel import cel_list, cel_string
from steer.core.admission_policy.objects import Json, policy_and_binding, resource_rule
from steer.core.policy import Policy

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
    `status.capacity`/`allocatable` under the resource prefix, a former one (what pods still
    hold there is kept published until released) or the label prefix. Nothing else of a Node
    may change in its writes, so a bug or a stolen token cannot relabel, taint (a NoExecute
    taint evicts) or drain a node outside the policy."""
    prefixes = list(
        dict.fromkeys(
            [
                policy.spec.label_prefix,
                *policy.spec.resource_prefixes,
                *LEGACY_PREFIXES,
                *also_prefixes,
            ]
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
    return policy_and_binding(
        policy,
        name,
        match_constraints={
            "resourceRules": [
                resource_rule(["UPDATE"], ["nodes", "nodes/status"], scope="Cluster")
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
