"""Whether a kube-steer rule keeps a pod Pending, said in one line for a Kubernetes Event.

Pure: a `PodExplanation` in, a message or None out. The pod is explained as it is stored (the
webhook steered it at admission, its trace says so): what the scheduler reads. A kube-steer
rule blocks the pod when some
node would be a place for it but for kube-steer's rules alone: its gates and pools (`avoid:`,
`overcommit:`, `budget:`, `reserved:`, `budget:pool`) and the taints the scorer sets. Where
every node is also excluded by something else (the pod's own fields, resources, foreign
taints), the scheduler's own message says enough and there is nothing to add.
"""

from __future__ import annotations

from collections.abc import Set

from scorer.explain.view import Exclusion, PodExplanation

STEERING_RULE_KINDS = ("avoid:", "overcommit:", "budget:", "reserved:")
MAX_MESSAGE = 1000  # Event messages are cut by the apiserver near 1 KiB
NODES_SHOWN = 3


def steering_rule(exclusion: Exclusion, owned_taints: Set[str]) -> bool:
    """Whether the exclusion is one of kube-steer's rules."""
    if exclusion.rule.startswith(STEERING_RULE_KINDS):
        return True
    taint = exclusion.data.get("taint")
    return (
        exclusion.rule.startswith("taint ")
        and isinstance(taint, dict)
        and (taint.get("key") in owned_taints)
    )


def blocking_message(explained: PodExplanation, owned_taints: Set[str]) -> str | None:
    """The Event message for a pod kube-steer's rules keep Pending, or None."""
    if explained.allowed or explained.problems:
        return None
    blocked = [
        v
        for v in explained.excluded
        if v.exclusions and all(steering_rule(e, owned_taints) for e in v.exclusions)
    ]
    if not blocked:
        return None
    total = len(explained.verdicts)
    rules = sorted({e.rule for v in blocked for e in v.exclusions})
    shown = "; ".join(
        f"{v.node}: " + ", ".join(f"{e.rule} ({e.reason})" for e in v.exclusions)
        for v in blocked[:NODES_SHOWN]
    )
    more = f"; and {len(blocked) - NODES_SHOWN} more" if len(blocked) > NODES_SHOWN else ""
    message = (
        f"kube-steer rules {', '.join(rules)} keep the pod off {len(blocked)} of {total} nodes "
        f"where nothing else excludes it (policy {explained.policy_version}): {shown}{more}"
    )
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
