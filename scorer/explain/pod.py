"""Where a pod may go: the scheduler's filters and NodeAffinity's ranking, simulated on the
labels, taints and resources each node carries once the plan is applied.

Pure: a `CyclePlan`, the nodes as read and a pod spec in, a `PodExplanation`
(scorer/explain/view/) out. The pod evaluated is the one the webhook admits, and whether it
admits it is the webhook's own decision (`steer.core.decision.decide`): its patch applied, its
validation's denials and warnings; so the answer matches what the webhook and the stock
scheduler do with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from scorer.cycle.plan import CyclePlan, NodePlan
from scorer.explain.nodes import condition_text, counter_view, gate_view, pool_view, time_text
from scorer.explain.view import (
    AdmissionView,
    DeviceAskView,
    Exclusion,
    NodeVerdict,
    PodExplanation,
)
from scorer.model import NodeState
from steer.core.decision import Admission, AdmissionPlans, PodRequest, decide
from steer.core.dra.catalog import DeviceCatalog
from steer.core.dra.claims import DeviceAsk
from steer.core.dra.classes import implicit_extended_name
from steer.core.encoding import preference_weight
from steer.core.mutation import Mutation
from steer.core.pod_shape import (
    UninterpretablePod,
    node_selector_of,
    pod_spec_of,
    preferred_terms,
    required_terms,
    tolerations_of,
)
from steer.core.policy import Policy
from steer.core.policy.spec import Mode
from steer.core.quantity import QuantityError
from steer.core.scheduling import (
    UNSCHEDULABLE_TAINT,
    Taint,
    blocking_taints,
    node_selector_matches,
    pod_requests,
    selector_problems,
    term_matches,
    terms_match,
    tolerated,
    toleration_problems,
)
from steer.core.steering import (
    condition_key,
    dimension_key,
    overcommit_key,
    owned_label_keys,
    owned_taint_keys,
)

# The plans of the last few policies explained against, by content digest: a plan is built
# once per policy change, as the webhook builds its own.
_PLANS: dict[str, AdmissionPlans] = {}


def _plans(policy: Policy) -> AdmissionPlans:
    plans = _PLANS.get(policy.digest)
    if plans is None:
        plans = AdmissionPlans.from_policy(policy)
        if len(_PLANS) >= 4:
            _PLANS.clear()
        _PLANS[policy.digest] = plans
    return plans


def effective_labels(
    node: NodeState, plan: NodePlan | None, owned: frozenset[str]
) -> dict[str, str]:
    """The node's labels once `plan` is applied (its own view when this replica does not write)."""
    if plan is None:
        return dict(node.labels)
    labels = {k: v for k, v in node.labels.items() if k not in owned}
    labels.update(plan.labels)
    return labels


def effective_taints(
    node: NodeState, plan: NodePlan | None, owned: frozenset[str]
) -> tuple[Taint, ...]:
    if plan is None:
        return node.taints
    replaced = owned | plan.retired_taint_keys
    return tuple(t for t in node.taints if t.key not in replaced) + plan.taints


def _key_data(
    policy: Policy, plan: NodePlan | None, key: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The data behind one label key on one node: the label, and the observation behind it."""
    data: dict[str, Any] = {"key": key, "label": labels.get(key)}
    if plan is None:
        return data
    for dim in policy.spec.dimensions:
        if dimension_key(policy, dim) == key and dim.name in plan.dimensions:
            entry = plan.dimensions[dim.name]
            data.update(
                dimension=dim.name,
                raw=entry.raw,
                status=str(entry.status),
                observedAt=time_text(entry.observed_at),
            )
    for rule in policy.spec.taints:
        if condition_key(policy, rule) == key and rule.name in plan.conditions:
            cond = plan.conditions[rule.name]
            data.update(
                condition=condition_text(policy, rule.name),
                observed=cond.observed,
                status=str(cond.status),
            )
    return data


def _gate_label(policy: Policy, rule: str) -> str | None:
    """The label whose data closes a gate: the taint rule's condition, or `overcommit-pct`."""
    kind, _, name = rule.partition(":")
    if kind == "avoid":
        return condition_key(policy, policy.taint_rule(name))
    if kind == "overcommit":
        return overcommit_key(policy)
    return None


def _resource_exclusions(
    policy: Policy, plan: NodePlan, requests: Mapping[str, Fraction], labels: Mapping[str, str]
) -> list[Exclusion]:
    """What NodeResourcesFit refuses of the gates and pools this plan publishes: a request above
    what is free there (capacity - what the node's bound pods hold)."""
    out = []
    for gate in plan.gates:
        need = requests.get(gate.resource, Fraction(0))
        if need > 0 and need > gate.free:
            data: dict[str, Any] = {"gate": gate_view(gate).to_json()}
            key = _gate_label(policy, gate.rule)
            if key is not None:
                data["label"] = _key_data(policy, plan, key, labels)
            out.append(
                Exclusion(
                    rule=gate.rule,
                    reason=f"{gate.resource} is {'open' if gate.open else 'closed'} "
                    f"({gate.why}): {max(gate.free, 0)} free",
                    data=data,
                )
            )
    for pool in plan.pools:
        need = requests.get(pool.resource, Fraction(0))
        if need > 0 and need > pool.free:
            out.append(
                Exclusion(
                    rule="budget:pool",
                    reason=(
                        f"{pool.resource}: the pod needs {_quantity_text(need)} {pool.unit}, "
                        f"{max(pool.free, 0)} free ({pool.capacity} published - {pool.taken} "
                        "held by pods in the pool)"
                    ),
                    data={"needs": int(need), "pool": pool_view(pool).to_json()},
                )
            )
    for counter in plan.counters:
        need = requests.get(counter.resource, Fraction(0))
        if need > 0 and need > counter.free:
            out.append(
                Exclusion(
                    rule=f"devices:{counter.pod_class}",
                    reason=(
                        f"{counter.resource}: the pod counts {_quantity_text(need)} devices, "
                        f"{max(counter.free, 0)} free ({counter.capacity} published - "
                        f"{counter.held} held by the node's pods)"
                    ),
                    data={"needs": int(need), "counter": counter_view(counter).to_json()},
                )
            )
    return out


def explain_pod(
    policy: Policy,
    cycle: CyclePlan | None,
    nodes: Sequence[NodeState],
    pod: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    namespace: str | None = None,
    mode: Mode | None = None,
    devices: DeviceCatalog | None = None,
    bound_node: str | None = None,
    user_info: Mapping[str, Any] | None = None,
) -> PodExplanation:
    """Which nodes the scheduler's filters leave for the pod once the webhook has steered it,
    their rank, and why the others are excluded.

    The pod is evaluated as the webhook admits it, created by `user_info` (None: a user who is
    neither a DaemonSet controller nor a kubelet): the webhook's decision
    (`steer.core.decision.decide`) gives its patch, so with the injected preferred terms,
    tolerations, gate and pool requests and schedulerName, and says whether validation admits
    it, with what warnings (`PodExplanation.admission`); the pod is then placed under
    Kubernetes' rules (`steer.core.scheduling`). A node is excluded by NodeAffinity
    (nodeSelector and required terms; the reasons name the pod's own field that fails),
    NoSchedule/NoExecute taints and cordons the pod does not tolerate, NodeResourcesFit, and
    the gates and pools this cycle publishes. Rank is by the weight the NodeAffinity plugin
    would add up: the injected preference terms plus the pod's own other preferred terms (ties
    share a rank).
    A pod of a namespace that is not opted in is evaluated as it is: the webhook leaves it alone.
    So is infrastructure (steer/core/infrastructure.py) and a pod of an audited tenant (Spec.mode_for), unless `mode` asks what the other mode
    would do (the audit report asks for `enforce`).
    The pod is classified as the webhook classifies it, its claims looked up in `devices` (the
    scorer's DRA snapshot; None: no claim is known), and the explanation lists the devices it
    asks for and by which form, and what it was classified without.
    Raises UninterpretablePod for a malformed field.
    """
    spec = pod_spec_of(pod)
    if spec is pod:
        as_pod: Mapping[str, Any] = {"metadata": {}, "spec": spec}
    elif pod.get("metadata") is None:
        as_pod = {**pod, "metadata": {}}
    else:
        as_pod = pod
    plans = _plans(policy)
    tenant = plans.mutation.tenant(namespace_labels)
    request = PodRequest(as_pod, namespace, namespace_labels, user_info, devices=devices, mode=mode)
    admission = decide(plans, request)
    unreadable = admission.mutation.unreadable
    if unreadable is not None:
        raise UninterpretablePod(unreadable.field, unreadable.reason)
    mutation = admission.mutation.mutation
    assert mutation is not None  # a CREATE whose namespace's labels are known is judged
    pieces = mutation.pieces
    steered = admission.pod["spec"]
    preferences = pieces.preference_terms if pieces else ()
    gate_rules = {g.resource: g.rule for g in pieces.resources.gates} if pieces else {}
    try:
        requests = pod_requests(steered)
    except QuantityError as exc:
        raise UninterpretablePod("spec.containers", str(exc)) from None
    gates = tuple(sorted(n for n in requests if n in gate_rules))
    user_terms = required_terms(spec)
    steered_terms = required_terms(steered)
    node_selector = node_selector_of(steered)
    tolerations = tolerations_of(steered)
    # The policy's tolerations the pod carries once steered (added now, or at its admission).
    injected = tuple(t for _, t in pieces.tolerations if t in tolerations) if pieces else ()
    problems = (
        toleration_problems(tolerations)
        + selector_problems(user_terms, "spec.affinity.nodeAffinity.required.nodeSelectorTerms")
        + tuple(f"the webhook denies it: {d.message}" for d in admission.denials)
    )
    owned_labels = owned_label_keys(policy)
    owned_taints = owned_taint_keys(policy)
    injected_prefs = pieces.preferred if pieces else ()
    user_prefs = [t for t in preferred_terms(steered) if t not in injected_prefs]
    # Claims are judged against the nodes' DRA devices only when the scorer sees some (its
    # DRA watches run): without them every node would read as having none.
    dra_seen = any(n.devices for n in nodes)
    # A bound pod's own claims hold devices on its node: that node is not judged by them.
    bound_node = bound_node or str(spec.get("nodeName") or "") or None
    claim_asks = tuple(
        a
        for a in (mutation.classification.asks if mutation.classification else ())
        if a.form != "extended" and a.device_classes
    )
    verdicts = []
    for node in nodes:
        plan = cycle.node(node.name) if cycle is not None else None
        labels = effective_labels(node, plan, owned_labels)
        taints = effective_taints(node, plan, owned_taints)
        exclusions: list[Exclusion] = []
        if problems:
            exclusions.append(
                Exclusion(
                    rule="admission", reason="the pod is not admitted: " + "; ".join(problems)
                )
            )
        exclusions += _affinity_exclusions(
            policy,
            plan,
            node.name,
            labels,
            node_selector,
            user_terms,
            steered_terms,
        )
        for taint in blocking_taints(tolerations, taints, unschedulable=node.unschedulable):
            if taint == UNSCHEDULABLE_TAINT and node.unschedulable:
                exclusions.append(
                    Exclusion(
                        rule="node.spec.unschedulable",
                        reason=f"the node is cordoned and the pod does not tolerate {taint}",
                    )
                )
                continue
            data: dict[str, Any] = {"taint": taint.to_k8s()}
            if taint.key in owned_taints:
                data.update(_key_data(policy, plan, taint.key, labels))
            exclusions.append(
                Exclusion(rule=f"taint {taint}", reason="the pod does not tolerate it", data=data)
            )
        soft = [str(t) for t in taints if not t.blocks and not tolerated(tolerations, t)]
        exclusions += _fit_exclusions(node, plan, requests, gate_rules, node.name == bound_node)
        if dra_seen and node.name != bound_node:
            exclusions += _device_exclusions(node, claim_asks)
        if plan is not None:
            exclusions += _resource_exclusions(policy, plan, requests, labels)
        user_weight = sum(
            int(p.get("weight", 0))
            for p in user_prefs
            if term_matches(p.get("preference") or {}, labels, node.name)
        )
        verdicts.append(
            NodeVerdict(
                node=node.name,
                exclusions=tuple(exclusions),
                steering_weight=preference_weight(labels, preferences),
                user_weight=user_weight,
                soft_taints=tuple(soft),
            )
        )

    allowed = sorted(
        (v for v in verdicts if v.allowed),
        key=lambda v: (-(v.steering_weight + v.user_weight), v.node),
    )
    ranked: list[NodeVerdict] = []
    for i, verdict in enumerate(allowed):
        total = verdict.steering_weight + verdict.user_weight
        if ranked and ranked[-1].steering_weight + ranked[-1].user_weight == total:
            rank = ranked[-1].rank
        else:
            rank = i + 1
        ranked.append(
            NodeVerdict(
                verdict.node,
                (),
                verdict.steering_weight,
                verdict.user_weight,
                rank,
                verdict.soft_taints,
            )
        )
    excluded = sorted((v for v in verdicts if not v.allowed), key=lambda v: v.node)
    return PodExplanation(
        policy_version=policy.version,
        pod_class=pieces.pod_class if pieces else None,
        tenant=tenant.name if tenant else None,
        preferences=preferences,
        gates=gates,
        verdicts=tuple(ranked + excluded),
        injected_tolerations=injected,
        problems=problems,
        steered=mutation.skipped is None and not mutation.audit,
        audit=mutation.audit,
        rules=mutation.in_effect,
        skipped=mutation.skipped,
        device_asks=_device_asks(mutation),
        device_notes=mutation.notes,
        admission=admission_view(admission),
    )


def admission_view(admission: Admission) -> AdmissionView:
    """What the webhooks answer: admitted or refused, the apiserver's message, the warnings."""
    return AdmissionView(
        allowed=admission.allowed, message=admission.message, warnings=admission.warnings
    )


def _device_asks(mutation: Mutation) -> tuple[DeviceAskView, ...]:
    asks = mutation.classification.asks if mutation.classification else ()
    return tuple(
        DeviceAskView(
            form=a.form,
            name=a.name,
            device_classes=None if a.device_classes is None else tuple(sorted(a.device_classes)),
            text=a.text(),
        )
        for a in asks
    )


def _fit_exclusions(
    node: NodeState,
    plan: NodePlan | None,
    requests: Mapping[str, Fraction],
    gate_rules: Mapping[str, str],
    bound_here: bool = False,
) -> list[Exclusion]:
    """NodeResourcesFit against the node's allocatable, before other pods take their share
    (the scorer does not track cpu and memory in use). A gate or pool this cycle publishes is
    judged by `_resource_exclusions` instead, with what the node's pods hold. A node whose
    allocatable was not read (empty) is not judged."""
    if not node.allocatable:
        return []
    planned = (
        {p.resource for p in plan.pools}
        | {g.resource for g in plan.gates}
        | {c.resource for c in plan.counters}
        if plan
        else set()
    )
    out = []
    for name, need in requests.items():
        if need <= 0 or name in planned:
            continue
        # Served from the node's DRA devices (a DeviceClass maps the name to them); a bound
        # pod's own claim holds some of those on its node.
        if node.devices.get(name, 0) > 0:
            free = node.free_devices.get(name, 0)
            if need > free and not bound_here:
                out.append(
                    Exclusion(
                        rule="dra",
                        reason=f"{name}: the pod requests {_quantity_text(need)}, the node has "
                        f"{free} free of its {node.devices[name]} devices a DeviceClass maps to it",
                        data={"resource": name, "devices": node.devices[name], "free": free},
                    )
                )
            continue
        offered = node.amounts.get(name, Fraction(0))
        if need > offered and name in gate_rules:
            out.append(
                Exclusion(
                    rule=gate_rules[name],
                    reason=f"the gate {name} is {node.allocatable.get(name, 'not published')} on "
                    "the node (the scorer publishes it once it has seen the node's pods)",
                    data={"resource": name, "allocatable": node.allocatable.get(name)},
                )
            )
        elif need > offered:
            out.append(
                Exclusion(
                    rule="resources",
                    reason=f"{name}: the pod requests {_quantity_text(need)}, the node's "
                    f"allocatable is {node.allocatable.get(name, '0')}",
                    data={"resource": name, "allocatable": node.allocatable.get(name)},
                )
            )
    return out


def _device_exclusions(node: NodeState, asks: Sequence[DeviceAsk]) -> list[Exclusion]:
    """A claim (or template) whose DeviceClasses the node has no device of, or no free one
    of: the scheduler cannot allocate it there. At least one device is asked; a claim asking
    more may still not fit where one is free (the scheduler counts)."""
    out = []
    for ask in asks:
        classes = sorted(ask.device_classes or ())
        names = [implicit_extended_name(c) for c in classes]
        if not any(node.devices.get(n, 0) for n in names):
            out.append(
                Exclusion(
                    rule="dra",
                    reason=f"{ask.text()}: the node has no device of "
                    f"{' or '.join(classes)} in its ResourceSlices",
                    data={"deviceClasses": classes},
                )
            )
        elif not any(node.free_devices.get(n, 0) for n in names):
            out.append(
                Exclusion(
                    rule="dra",
                    reason=f"{ask.text()}: every {' or '.join(classes)} device of the node is "
                    "held by a claim",
                    data={
                        "deviceClasses": classes,
                        "devices": sum(node.devices.get(n, 0) for n in names),
                    },
                )
            )
    return out


def _quantity_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


def _affinity_exclusions(
    policy: Policy,
    plan: NodePlan | None,
    node: str,
    labels: Mapping[str, str],
    node_selector: Mapping[str, Any],
    user_terms: Sequence[Mapping[str, Any]] | None,
    steered_terms: Sequence[Mapping[str, Any]] | None,
) -> list[Exclusion]:
    """NodeAffinity's verdict on the mutated pod, with the policy rules and the pod's own
    fields that fail as reasons (the merged terms fail exactly when one of those does)."""
    out = []
    if not node_selector_matches(node_selector, labels):
        mismatched = {k: v for k, v in node_selector.items() if labels.get(k) != str(v)}
        out.append(
            Exclusion(
                rule="pod.spec.nodeSelector",
                reason="node labels do not match the pod's nodeSelector",
                data={"wanted": mismatched, "node": {k: labels.get(k) for k in mismatched}},
            )
        )
    if terms_match(steered_terms, labels, node):
        return out
    if not terms_match(user_terms, labels, node):
        out.append(
            Exclusion(
                rule="pod.spec.affinity.nodeAffinity.required",
                reason="no nodeSelectorTerm of the pod matches the node",
                data={"terms": list(user_terms or ())},
            )
        )
    return out
