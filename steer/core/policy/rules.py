"""What the policy does with pods and nodes beyond scores: taint rules on a dimension's value,
pod classes recognised by what they request, and topology spread rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

from steer.core.k8s_names import label_key_errors
from steer.core.policy.contract import CORE_RESOURCES
from steer.core.policy.fields import Cycles, MaxSkew, Name, NonNegative, ObjectName, PolicyModel
from steer.core.policy.issues import PolicyIssue, nested


class Condition(PolicyModel):
    dimension: str
    # `source: raw` compares the metric as Prometheus returned it; `score` the 0..100 score.
    source: Literal["raw", "score"] = "raw"
    operator: Literal["Gt", "Ge", "Lt", "Le"]
    value: float
    # Once the condition holds, it clears only when the value is back past `value` by this
    # much (same unit as `value`): a node hovering at the threshold keeps its taint instead of
    # being rewritten every few cycles.
    margin: NonNegative = 0.0

    def holds(self, observed: float, *, active: bool = False) -> bool:
        """Whether the condition holds; `active` (it held before) applies the clearing margin."""
        shift = self.margin if active else 0.0
        if self.operator in ("Gt", "Ge"):
            bound = self.value - shift
            return observed > bound if self.operator == "Gt" else observed >= bound
        bound = self.value + shift
        return observed < bound if self.operator == "Lt" else observed <= bound

    def issues(self) -> Iterator[PolicyIssue]:
        if self.source == "score" and not 0 <= self.value <= 100:
            yield PolicyIssue(
                "value", f"a score condition compares against 0..100, got {self.value}"
            )


class TaintRule(PolicyModel):
    """A condition on a dimension that marks a node (label `<prefix><name>=true`) and taints it.

    `setAfterCycles`/`clearAfterCycles` debounce the condition so one noisy sample does not
    taint (and, with NoExecute, evict) a node.
    """

    name: Name
    condition: Condition
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    set_after_cycles: Cycles = 2
    clear_after_cycles: Cycles = 3
    # Security rules deny tolerations of this taint even when the webhook is down: the
    # apiserver enforces them itself through the ValidatingAdmissionPolicy that
    # `steer policy admission-policy` generates (steer/core/admission_policy/security.py).
    security: bool = False

    def issues(self) -> Iterator[PolicyIssue]:
        yield from nested("condition", self.condition.issues())


class PodClass(PolicyModel):
    """Pods recognised by what they request; each class is steered by its own composite.

    A pod is in the class when it requests (or limits) one of `requestsAny`, or asks for a
    device of one of `deviceClasses` (DRA): by a claim or claim template whose requests name
    the DeviceClass, or by an extended resource the DeviceClass maps (`extendedResourceName`,
    `deviceclass.resource.kubernetes.io/<class>`)."""

    name: Name
    requests_any: tuple[str, ...] = ()
    device_classes: tuple[ObjectName, ...] = ()
    dimensions: tuple[str, ...] = ()
    scheduler_profile: ObjectName | None = None
    avoid: tuple[str, ...] = ()
    # Nodes that offer one of `requestsAny` (allocatable > 0) are kept for this class: the
    # scorer labels them `<prefix>reserved-for-<class>=true`, and the webhook steers every other
    # opted-in pod away from them, by preference (`prefer`: only when nothing else fits) or
    # by a required term (`require`). A node carrying a taint the class avoids is not reserved:
    # the class cannot use it.
    reserve_nodes: Literal["none", "prefer", "require"] = "none"

    def issues(self) -> Iterator[PolicyIssue]:
        """What the class is recognised by. Its `dimensions` are checked by the spec, which
        holds them."""
        if not self.requests_any and not self.device_classes:
            yield PolicyIssue(
                "requestsAny", "must list at least one resource name (or set deviceClasses)"
            )
        core = sorted(set(self.requests_any) & CORE_RESOURCES)
        if self.reserve_nodes != "none" and core:
            yield PolicyIssue(
                "reserveNodes",
                f"every node offers {', '.join(core)}: reserve nodes by an extended resource "
                "(e.g. nvidia.com/gpu) only",
            )


class SpreadRule(PolicyModel):
    name: Name
    label_key: str
    topology_key: str = "topology.kubernetes.io/zone"
    max_skew: MaxSkew = 1
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "ScheduleAnyway"
    match_label_keys: tuple[str, ...] = ()
    # Whether nodes with a NoSchedule/NoExecute taint the pod does not tolerate count as
    # domains (`Honor`) or not; unset leaves the Kubernetes default (`Ignore`). With `Ignore`,
    # a zone the scorer tainted `unhealthy` keeps its count, and a hard constraint holds the
    # other zones to it.
    node_taints_policy: Literal["Honor", "Ignore"] | None = None

    def issues(self) -> Iterator[PolicyIssue]:
        for problem in label_key_errors(self.label_key):
            yield PolicyIssue("labelKey", problem)
        for problem in label_key_errors(self.topology_key):
            yield PolicyIssue("topologyKey", problem)
