"""The audit report (Spec.mode_for): every bound pod the webhook audited (its trace says
`"mode": "audit"`), explained as enforce mode would have steered it, against the node the
scheduler chose.

Pure: the plan, the nodes and the pods as listed in, an `AuditReport`
(scorer/explain/view/audit_report.py) out. A pod is judged as it was created (without its
`spec.nodeName`) against the nodes as they are now, with its own usage on its node: a node it
fills may read as full. Each judgement is one explanation over every node (about 80 ms at
5,000 nodes), so at most `limit` pods are judged, the last bound first; the report says how
many were left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scorer.cycle.plan import CyclePlan
from scorer.explain.pod import explain_pod
from scorer.explain.view import AuditedPod, AuditReport, RuleCount
from scorer.model import NodeState, binding_time
from steer.core.dra.catalog import DeviceCatalog
from steer.core.mutation import read_trace
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import AUDIT, Policy
from steer.core.steering import trace_annotation_key

DIVERGENT_SHOWN = 50
DEFAULT_LIMIT = 100  # about 8 s of judging at 5,000 nodes


def audit_mode_of(pod: Mapping[str, Any], trace_key: str) -> bool:
    """Whether the pod's trace says the webhook audited it."""
    trace = read_trace(pod, trace_key)
    return trace is not None and trace.get("mode") == AUDIT


def audit_pod(
    policy: Policy,
    cycle: CyclePlan | None,
    nodes: Sequence[NodeState],
    pod: Mapping[str, Any],
    namespace_labels: Mapping[str, str],
    devices: DeviceCatalog | None = None,
) -> AuditedPod:
    """One bound pod judged as enforce mode would have steered it. Raises UninterpretablePod."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = str(spec.get("nodeName") or "")
    namespace = str(metadata.get("namespace") or "")
    as_created = {
        "metadata": metadata,
        "spec": {k: v for k, v in spec.items() if k != "nodeName"},
    }
    explained = explain_pod(
        policy,
        cycle,
        nodes,
        as_created,
        namespace_labels,
        namespace,
        mode="enforce",
        devices=devices,
        bound_node=node or None,
    )
    verdict = next((v for v in explained.verdicts if v.node == node), None)
    excluded_by = (
        ("node not known to the scorer",)
        if verdict is None
        else tuple(dict.fromkeys(e.rule for e in verdict.exclusions))
    )
    return AuditedPod(
        namespace=namespace,
        name=str(metadata.get("name") or ""),
        node=node,
        tenant=explained.tenant,
        pod_class=explained.pod_class,
        excluded_by=excluded_by,
        rank=verdict.rank if verdict is not None else None,
        allowed=len(explained.allowed),
    )


def audit_report(
    policy: Policy,
    cycle: CyclePlan | None,
    nodes: Sequence[NodeState],
    pods: Iterable[Mapping[str, Any]],
    namespace_labels: Mapping[str, Mapping[str, str]],
    *,
    limit: int = DEFAULT_LIMIT,
    devices: DeviceCatalog | None = None,
) -> AuditReport:
    """The report over the audited, bound pods among `pods` (any pods: the others are
    skipped); `namespace_labels` by namespace name."""
    trace_key = trace_annotation_key(policy)
    audited = [
        p for p in pods if (p.get("spec") or {}).get("nodeName") and audit_mode_of(p, trace_key)
    ]
    audited.sort(key=lambda p: binding_time(p) or 0.0, reverse=True)
    judged: list[AuditedPod] = []
    unjudged = 0
    for pod in audited[:limit]:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        try:
            judged.append(
                audit_pod(policy, cycle, nodes, pod, namespace_labels.get(namespace, {}), devices)
            )
        except UninterpretablePod:
            unjudged += 1
    rules: Counter[str] = Counter()
    for one in judged:
        rules.update(one.excluded_by)
        if not one.excluded_by and one.rank is not None and one.rank > 1:
            rules["rank"] += 1
    divergent = sorted(
        (p for p in judged if not p.agrees),
        key=lambda p: (not p.excluded_by, p.rank or 0, p.namespace, p.name),
    )
    return AuditReport(
        policy_version=policy.version,
        pods=len(judged),
        agreed=sum(1 for p in judged if p.agrees),
        on_excluded=sum(1 for p in judged if p.excluded_by),
        by_rule=tuple(
            RuleCount(rule, n) for rule, n in sorted(rules.items(), key=lambda r: (-r[1], r[0]))
        ),
        ranks=dict(Counter(p.rank for p in judged if not p.excluded_by and p.rank is not None)),
        divergent=tuple(divergent[:DIVERGENT_SHOWN]),
        unjudged=unjudged,
        left_out=max(0, len(audited) - limit),
    )
