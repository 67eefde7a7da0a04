"""The DeschedulerPolicy (`descheduler/v1alpha2`) that corrects placement drift, generated from
the steering policy (`steer descheduler policy`), so it matches its own labels and taints.

Placement is decided once; this tells the descheduler which pods to evict when a node changes
after they were placed. Their replacements are placed again by the scheduler, steered as any
new pod. One policy, one descheduler run, two profiles:

- **correction**: a pod whose own required nodeAffinity no longer matches its node
  (RemovePodsViolatingNodeAffinity, `requiredDuringSchedulingIgnoredDuringExecution`), and a pod
  on a node that carries one of the policy's taints it does not tolerate
  (RemovePodsViolatingNodeTaints, `includedTaints` restricted to them).
- **consolidation** (`descheduling.consolidation.enabled`): the pods of nodes the scorer marks as
  drain candidates, by their PreferNoSchedule taint `<labelPrefix>drain-candidate` (the same
  RemovePodsViolatingNodeTaints, with its own `includedTaints`), older than
  `consolidation.minPodAgeSeconds`; the taint also keeps the scheduler's new pods elsewhere.

Preferred terms evict nothing: kube-steer's score labels move with load, and the webhook's
binary-weighted preferences would find a better node for most pods after almost every cycle,
so `preferredDuringSchedulingIgnoredDuringExecution` would turn each score change into churn.
Where a preference must become an eviction, the policy names it (a PreferNoSchedule taint rule
in `descheduling.preferNoScheduleTaints`), and its taint, debounced by the scorer, is the signal.

Why consolidation keys on a taint, not on the drain-candidate label: a DeschedulerPolicy's
`nodeSelector` restricts every profile, and descheduler v0.36 skips the whole cycle when it
selects fewer than 2 nodes ("requires >=2 nodes"), so a single candidate would never be
emptied; HighNodeUtilization takes the nodes it empties and the nodes it fills from that same
set, so restricted to candidates it has nothing to fill, and unrestricted it empties nodes the
scorer keeps.

Safe limits, in every profile: only opted-in namespaces (the DefaultEvictor's
`namespaceLabelSelector`, the policy's `optIn` selector) minus `optIn.excludedNamespaces`,
kube-system and the project's namespace; the DefaultEvictor's default protections (DaemonSet,
mirror and static pods, system-critical pods, pods with local storage, bare pods);
`nodeFit: true` (evict only a pod another node would take); per-node, per-namespace and total
caps per cycle; evictions through the Eviction API, so PodDisruptionBudgets hold.
"""

from __future__ import annotations

from typing import Any

from steer.core.policy import DRAIN_LABEL, Policy, PolicyError, PolicyIssue

API_VERSION = "descheduler/v1alpha2"
KIND = "DeschedulerPolicy"
ALWAYS_EXCLUDED = ("kube-system",)


def drain_candidate_key(policy: Policy) -> str:
    """The key of the PreferNoSchedule taint the scorer sets on the drain candidates it marks
    (steer.core.steering.drain_taint_key), the same key as their label."""
    return policy.label_key(DRAIN_LABEL)


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


def _taints_plugin(policy: Policy, keys: list[str], prefer_no_schedule: bool) -> dict[str, Any]:
    args: dict[str, Any] = {
        "includedTaints": keys,
        "namespaces": {"exclude": excluded_namespaces(policy)},
    }
    if prefer_no_schedule:
        args["includePreferNoSchedule"] = True
    return {"name": "RemovePodsViolatingNodeTaints", "args": args}


def _profile(name: str, config: list[dict[str, Any]]) -> dict[str, Any]:
    enabled = [c["name"] for c in config if c["name"] != "DefaultEvictor"]
    return {"name": name, "pluginConfig": config, "plugins": {"deschedule": {"enabled": enabled}}}


def correction_profile(policy: Policy) -> dict[str, Any] | None:
    """Evict from nodes a required rule or one of the policy's taints now excludes."""
    settings = policy.spec.descheduling
    config = [_evictor(policy, settings.min_pod_age_seconds)]
    if settings.node_affinity:
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
        prefer = bool(settings.prefer_no_schedule_taints)
        config.append(_taints_plugin(policy, taints, prefer))
    return _profile("kube-steer-correction", config) if len(config) > 1 else None


def consolidation_profile(policy: Policy) -> dict[str, Any] | None:
    """Empty the drain candidates (their PreferNoSchedule taint), a few pods a cycle."""
    settings = policy.spec.descheduling.consolidation
    if not settings.enabled:
        return None
    config = [
        _evictor(policy, settings.min_pod_age_seconds),
        _taints_plugin(policy, [drain_candidate_key(policy)], True),
    ]
    return _profile("kube-steer-consolidation", config)


def descheduler_policy(policy: Policy) -> dict[str, Any]:
    """The DeschedulerPolicy: its profiles and the caps that hold across them. A policy that
    enables nothing gets a document with no profile (the descheduler then does nothing)."""
    limits = policy.spec.descheduling
    profiles = [
        p for p in (correction_profile(policy), consolidation_profile(policy)) if p is not None
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "maxNoOfPodsToEvictPerNode": limits.max_pods_per_node,
        "maxNoOfPodsToEvictPerNamespace": limits.max_pods_per_namespace,
        "maxNoOfPodsToEvictTotal": limits.max_pods_total,
        "profiles": profiles,
    }
