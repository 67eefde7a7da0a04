"""`/explain/audit`: in audit mode, how the scheduler's choices compare with the policy's, from
the pods as they are placed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = Mapping[str, Any]  # a JSON object as answered, read back


@dataclass(frozen=True)
class AuditedPod:
    """One bound pod of an audited tenant, judged as enforce mode would have steered it.

    `excluded_by` holds the rules that exclude its node (empty: the node is allowed);
    `rank` is the node's rank among the allowed ones (1: the policy's first choice), of
    `allowed` nodes in all."""

    namespace: str
    name: str
    node: str
    tenant: str | None
    pod_class: str | None
    excluded_by: tuple[str, ...]
    rank: int | None
    allowed: int

    @property
    def agrees(self) -> bool:
        return not self.excluded_by and self.rank == 1

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.node,
            "tenant": self.tenant,
            "podClass": self.pod_class,
            "excludedBy": list(self.excluded_by),
            "rank": self.rank,
            "allowed": self.allowed,
        }

    @classmethod
    def from_json(cls, obj: Json) -> AuditedPod:
        return cls(
            namespace=obj["namespace"],
            name=obj["name"],
            node=obj["node"],
            tenant=obj.get("tenant"),
            pod_class=obj.get("podClass"),
            excluded_by=tuple(obj.get("excludedBy") or ()),
            rank=obj.get("rank"),
            allowed=int(obj.get("allowed") or 0),
        )


@dataclass(frozen=True)
class RuleCount:
    """How many audited pods sit where one rule would not have put them."""

    rule: str
    pods: int

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "pods": self.pods}

    @classmethod
    def from_json(cls, obj: Json) -> RuleCount:
        return cls(obj["rule"], int(obj["pods"]))


@dataclass(frozen=True)
class AuditReport:
    """The audited pods bound now: how many sit on a node enforce mode would have excluded
    (per rule), and the rank of their node among the allowed ones. `rule` "rank" counts pods
    on an allowed node that is not a first choice (the preferred terms would have ranked
    another higher)."""

    policy_version: str
    pods: int
    agreed: int
    on_excluded: int
    by_rule: tuple[RuleCount, ...]
    ranks: Mapping[int, int]  # rank of the chosen node -> pods (allowed nodes only)
    divergent: tuple[AuditedPod, ...]  # the first pods that disagree, excluded ones first
    unjudged: int = 0  # pods the policy cannot read (a malformed field)
    left_out: int = 0  # audited pods over the limit, not judged (the earliest bound)

    def to_json(self) -> dict[str, Any]:
        return {
            "policyVersion": self.policy_version,
            "pods": self.pods,
            "agreed": self.agreed,
            "onExcluded": self.on_excluded,
            "byRule": [r.to_json() for r in self.by_rule],
            "ranks": {str(k): v for k, v in sorted(self.ranks.items())},
            "divergent": [p.to_json() for p in self.divergent],
            "unjudged": self.unjudged,
            "leftOut": self.left_out,
        }

    @classmethod
    def from_json(cls, obj: Json) -> AuditReport:
        return cls(
            policy_version=obj["policyVersion"],
            pods=int(obj["pods"]),
            agreed=int(obj["agreed"]),
            on_excluded=int(obj["onExcluded"]),
            by_rule=tuple(RuleCount.from_json(r) for r in obj.get("byRule") or ()),
            ranks={int(k): int(v) for k, v in (obj.get("ranks") or {}).items()},
            divergent=tuple(AuditedPod.from_json(p) for p in obj.get("divergent") or ()),
            unjudged=int(obj.get("unjudged") or 0),
            left_out=int(obj.get("leftOut") or 0),
        )
