"""The DeschedulerPolicies (`descheduler/v1alpha2`) that correct placement drift, generated from
the steering policy (`steer descheduler policy`), so they match its own labels and taints.

Placement is decided once; these tell the descheduler which pods to evict when a node changes
after they were placed. Their replacements are placed again by the scheduler, steered as any
new pod. Two policies, because a DeschedulerPolicy's `nodeSelector` applies to all of it:

- **correction**, every node: a pod whose own required nodeAffinity no longer matches its node
  (RemovePodsViolatingNodeAffinity, `requiredDuringSchedulingIgnoredDuringExecution`), and a pod
  on a node that carries one of the policy's taints it does not tolerate
  (RemovePodsViolatingNodeTaints, `includedTaints` restricted to them).
- **consolidation**, only nodes the scorer marks `<labelPrefix>drain-candidate=true`: their pods
  older than `consolidation.minPodAgeSeconds` (PodLifeTime), so those nodes empty out.

Preferred terms evict nothing: kube-steer's score labels move with load, and the webhook's
binary-weighted preferences would find a better node for most pods after almost every cycle,
so `preferredDuringSchedulingIgnoredDuringExecution` would turn each score change into churn.
Where a preference must become an eviction, the policy names it (a PreferNoSchedule taint rule
in `descheduling.preferNoScheduleTaints`), and its taint, debounced by the scorer, is the signal.

HighNodeUtilization is not used for consolidation: it takes both the nodes it empties and the
nodes it fills from the policy's node set, so restricted to drain candidates it finds no node
to fill ("All nodes are underutilized"), and unrestricted it empties nodes the scorer keeps.

Safe limits, in every policy: only opted-in namespaces (the DefaultEvictor's
`namespaceLabelSelector`, the policy's `optIn` selector) minus `optIn.excludedNamespaces`,
kube-system and the project's namespace; the DefaultEvictor's default protections (DaemonSet,
mirror and static pods, system-critical pods, pods with local storage, bare pods);
`nodeFit: true` (evict only a pod another node would take); per-node, per-namespace and total
caps per cycle; evictions through the Eviction API, so PodDisruptionBudgets hold.
"""

from __future__ import annotations

from typing import Any, Literal

from steer.core.policy import Policy, PolicyError, PolicyIssue

API_VERSION = "descheduler/v1alpha2"
KIND = "DeschedulerPolicy"
# The label (after the prefix) the scorer sets to "true" on nodes that could be emptied.
DRAIN_CANDIDATE = "drain-candidate"
ALWAYS_EXCLUDED = ("kube-system",)

Purpose = Literal["correction", "consolidation"]
PURPOSES: tuple[Purpose, ...] = ("correction", "consolidation")


def drain_candidate_key(policy: Policy) -> str:
    return policy.label_key(DRAIN_CANDIDATE)


def evicting_taint_keys(policy: Policy) -> list[str]:
    """The taint keys whose appearance evicts the pods that do not tolerate them: every
    NoSchedule taint rule's, and the PreferNoSchedule rules the policy names."""
    named = set(policy.spec.descheduling.prefer_no_schedule_taints)
    return [
        policy.label_key(rule.name)
        for rule in policy.spec.taints
        if rule.effect == "NoSchedule" or rule.name in named
    ]


def excluded_namespaces(policy: Policy) -> list[str]:
    spec = policy.spec
    return sorted({*spec.opt_in.excluded_namespaces, *ALWAYS_EXCLUDED, spec.project_namespace})


def _namespace_selector(policy: Policy) -> dict[str, Any]:
    """The optIn selector as the DefaultEvictor takes it. The DefaultEvictor applies its
    `namespaceLabelSelector` only when it has `matchLabels` (descheduler v0.36): without them
    it would evict in every namespace, so such a policy gets no DeschedulerPolicy."""
    selector = policy.spec.opt_in.namespace_selector
    if not selector.match_labels:
        raise PolicyError(
            [
                PolicyIssue(
                    "spec.optIn.namespaceSelector.matchLabels",
                    "the descheduler ignores a namespaceLabelSelector without matchLabels (it "
                    "would evict in every namespace); add one, e.g. "
                    "{kube-steer.github.io/enabled: 'true'}",
                )
            ]
        )
    out: dict[str, Any] = {"matchLabels": dict(sorted(selector.match_labels.items()))}
    if selector.match_expressions:
        out["matchExpressions"] = [
            {
                "key": r.key,
                "operator": r.operator,
                **({"values": list(r.values)} if r.values else {}),
            }
            for r in selector.match_expressions
        ]
    return out


def _evictor(policy: Policy, min_pod_age_seconds: int) -> dict[str, Any]:
    args: dict[str, Any] = {"nodeFit": True, "namespaceLabelSelector": _namespace_selector(policy)}
    if min_pod_age_seconds:
        args["minPodAge"] = f"{min_pod_age_seconds}s"
    return {"name": "DefaultEvictor", "args": args}


def _document(policy: Policy, profiles: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    limits = policy.spec.descheduling
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        **extra,
        "maxNoOfPodsToEvictPerNode": limits.max_pods_per_node,
        "maxNoOfPodsToEvictPerNamespace": limits.max_pods_per_namespace,
        "maxNoOfPodsToEvictTotal": limits.max_pods_total,
        "profiles": profiles,
    }


def correction_policy(policy: Policy) -> dict[str, Any]:
    """Evict from nodes a required rule or one of the policy's taints now excludes. A policy
    that enables neither gets a document with no profile (the descheduler does nothing)."""
    settings = policy.spec.descheduling
    config: list[dict[str, Any]] = [_evictor(policy, settings.min_pod_age_seconds)]
    enabled: list[str] = []
    if settings.node_affinity:
        enabled.append("RemovePodsViolatingNodeAffinity")
        config.append(
            {
                "name": "RemovePodsViolatingNodeAffinity",
                "args": {
                    "nodeAffinityType": ["requiredDuringSchedulingIgnoredDuringExecution"],
                    "namespaces": {"exclude": excluded_namespaces(policy)},
                },
            }
        )
    taints = evicting_taint_keys(policy)
    if settings.taints and taints:
        enabled.append("RemovePodsViolatingNodeTaints")
        args: dict[str, Any] = {
            "includedTaints": taints,
            "namespaces": {"exclude": excluded_namespaces(policy)},
        }
        if settings.prefer_no_schedule_taints:
            args["includePreferNoSchedule"] = True
        config.append({"name": "RemovePodsViolatingNodeTaints", "args": args})
    if not enabled:
        return _document(policy, [])
    profile = {
        "name": "kube-steer-correction",
        "pluginConfig": config,
        "plugins": {"deschedule": {"enabled": enabled}},
    }
    return _document(policy, [profile])


def consolidation_policy(policy: Policy) -> dict[str, Any]:
    """Empty the drain candidates, oldest pods first, within the caps. Disabled: a document
    with no profile."""
    settings = policy.spec.descheduling.consolidation
    selector = f"{drain_candidate_key(policy)}=true"
    if not settings.enabled:
        return _document(policy, [], nodeSelector=selector)
    profile = {
        "name": "kube-steer-consolidation",
        "pluginConfig": [
            _evictor(policy, 0),
            {
                "name": "PodLifeTime",
                "args": {
                    "maxPodLifeTimeSeconds": settings.min_pod_age_seconds,
                    "namespaces": {"exclude": excluded_namespaces(policy)},
                },
            },
        ],
        "plugins": {"deschedule": {"enabled": ["PodLifeTime"]}},
    }
    return _document(policy, [profile], nodeSelector=selector)


def descheduler_policy(policy: Policy, purpose: Purpose = "correction") -> dict[str, Any]:
    return correction_policy(policy) if purpose == "correction" else consolidation_policy(policy)
