"""Gates: hard placement rules that a kubelet restart can never turn against a running pod.

A hard rule ("GPU pods keep off `gpu-hot` nodes", "dept-b only where its budget can hold") could
be a required node-affinity term on a label the scorer moves with load. But a kubelet re-admits
every pod bound to it whenever it restarts, against the node as it is then, and required node
affinity is part of that check (so are resources and NoExecute taints; NoSchedule taints and
inter-pod affinity are not): a label that moved turns a running pod `Failed NodeAffinity`.

A gate is a resource instead. Every pod a rule applies to requests one unit of the rule's gate;
the scorer publishes the gate on every node, **open** (capacity = the node's allocatable pods,
never less than what is held) where the rule lets new pods in, **closed** (capacity = exactly
what the pods bound there already hold) where it does not. The scheduler's NodeResourcesFit
refuses a closed node on every bind, with the pods it has just assumed counted; a kubelet
re-admits what is held. Nothing the scorer publishes is ever below what bound pods hold.

Names: `<resourcePrefix><gate>`, extended resources under the operator's domain (default
`kube-steer.github.io/`): integer, and the webhook sets the limit equal to the request, as the
API requires. NodeResourcesFit checks an extended resource's name on every node it filters
(`IsExtendedResourceName`: measured 5 to 9 us per node for a pod's two or three of them at
5,000 nodes), which the steer profiles pay on fewer nodes (`percentageOfNodesToScore: 5`);
`nativeResourceNames: true` keeps a prefix containing `kubernetes.io/` instead, which the
scheduler treats as native and does not check (docs/resources.md has the trade-off).

One window is left, and it is the scheduler's: a pod the scheduler bound in the milliseconds
before it saw a gate close may reach its kubelet while the gate counts it as one too many; the
kubelet then refuses that new pod at its first admission (`OutOf<gate>`), never a running one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from steer.core.policy import PodClass, Policy, TaintRule

# What a node offers of an open gate when its allocatable pods cannot be read.
DEFAULT_OPEN = 110


@dataclass(frozen=True)
class Gate:
    """One gate: the resource pods request one unit of, and the rule it stands for (shown in
    traces and explanations)."""

    resource: str
    rule: str


def avoid_gate(policy: Policy, rule: TaintRule) -> Gate:
    """Closed on nodes where the taint rule's condition holds, for the classes that avoid it."""
    return Gate(f"{policy.spec.resource_prefix}avoid-{rule.name}", f"avoid:{rule.name}")


def unreserved_gate(policy: Policy, pod_class: PodClass) -> Gate:
    """Closed on nodes reserved for the class (`reserveNodes: require`), for every other pod."""
    return Gate(
        f"{policy.spec.resource_prefix}unreserved-{pod_class.name}", f"reserved:{pod_class.name}"
    )


def open_capacity(amounts: Mapping[str, Fraction]) -> int:
    """What an open gate offers: one unit per pod the node may run (`amounts`: its
    allocatable, parsed)."""
    return max(int(amounts.get("pods", DEFAULT_OPEN)), 1)


def gate_capacity(is_open: bool, held: int, amounts: Mapping[str, Fraction]) -> int:
    """The capacity to publish: never below what the node's bound pods hold."""
    return max(held, open_capacity(amounts)) if is_open else held
