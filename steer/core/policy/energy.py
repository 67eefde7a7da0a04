"""Energy as efficiency: which dimensions say what a core of work costs on a node, the power
model that covers nodes without a measurement, consolidation and drain candidates.

A node's absolute watts rank an empty node best and a node taking work worse with every pod, so
steering by them spreads work. What placement decides is where a core of work runs (dynamic
watts per busy core) and how many nodes are awake at all (their idle watts): `wattsPerCore` and
`idleWatts` name the dimensions measuring those two (Kepler's dynamic/idle split). A node with
no work has no measured watts per core, so `powerModel` gives them from the node's spec (a label
such as `node.kubernetes.io/instance-type`) wherever no measurement is remembered; without it,
an idle efficient node would never be chosen.

`consolidation` ranks nodes already running pods above idle ones in every composite that counts
`wattsPerCore`, and takes the hot-node penalty off those composites: filling a node is the point
there, and the scheduler's own resource accounting stops it at full. `drainCandidates` marks
nodes whose movable pods fit on active nodes at least as efficient (scorer/cycle/plan/drain.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from steer.core.k8s_names import label_key_errors
from steer.core.policy.dimensions import Direction
from steer.core.policy.fields import Finite, NonNegative, PolicyModel, Weight, fmt
from steer.core.policy.issues import PolicyIssue

if TYPE_CHECKING:
    from steer.core.policy.spec import Spec

DRAIN_LABEL = "drain-candidate"
DRAIN_REASON_ANNOTATION = "drain-candidate-reason"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


class NodeType(PolicyModel):
    """What one kind of node draws: watts with nothing running, and dynamic watts per busy
    core (its data sheet, or a measurement of one node of the kind)."""

    idle_watts: NonNegative
    watts_per_core: NonNegative


class PowerModel(PolicyModel):
    """Node specs by the value of `nodeLabel`; a node whose value is not in `types` has none."""

    node_label: str = INSTANCE_TYPE_LABEL
    types: dict[str, NodeType] = Field(default_factory=dict)

    def of(self, labels: Mapping[str, str]) -> NodeType | None:
        value = labels.get(self.node_label)
        return None if value is None else self.types.get(value)


class Consolidation(PolicyModel):
    """`weight`: the weight of "the node already runs pods" (100 if so, 0 if not) beside the
    dimensions of every composite that counts `wattsPerCore`; 0 turns it off."""

    weight: Weight = 0.0


class DrainCandidates(PolicyModel):
    """Mark nodes whose movable pods (all but DaemonSet and mirror pods) fit, by their cpu and
    memory requests, on active nodes whose cores cost no more. `minSavedWatts`: only when
    emptying the node would save at least this (its idle watts plus what its cores would save).
    `maxCandidates`: at most this many nodes at a time, the costliest first (emptying a few
    nodes at once is what a descheduler or an autoscaler acts on; the search stays cheap)."""

    enabled: bool = False
    min_saved_watts: Finite = 0.0
    max_candidates: Annotated[int, Field(ge=1, le=1000)] = 10


class Energy(PolicyModel):
    watts_per_core: str | None = None
    idle_watts: str | None = None
    power_model: PowerModel = Field(default_factory=PowerModel)
    consolidation: Consolidation = Field(default_factory=Consolidation)
    drain_candidates: DrainCandidates = Field(default_factory=DrainCandidates)

    @property
    def consolidates(self) -> bool:
        return self.watts_per_core is not None and self.consolidation.weight > 0

    def modelled(self, dimension: str) -> str | None:
        """The NodeType field that covers `dimension` where it has no measurement, if any."""
        if dimension == self.watts_per_core:
            return "watts_per_core"
        if dimension == self.idle_watts:
            return "idle_watts"
        return None

    def issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        dims = {d.name: d for d in spec.dimensions}
        for field, name in (("wattsPerCore", self.watts_per_core), ("idleWatts", self.idle_watts)):
            if name is None:
                continue
            dim = dims.get(name)
            if dim is None:
                yield PolicyIssue(field, f"unknown dimension {name!r}; known: {sorted(dims)}")
            elif dim.direction is not Direction.LOWER_IS_BETTER:
                yield PolicyIssue(
                    field,
                    f"dimension {name!r} measures watts, so it needs direction: lowerIsBetter, "
                    f"got {dim.direction.value}",
                )
        if self.watts_per_core is not None and self.watts_per_core == self.idle_watts:
            yield PolicyIssue("idleWatts", "must name another dimension than wattsPerCore")
        for problem in label_key_errors(self.power_model.node_label):
            yield PolicyIssue("powerModel.nodeLabel", f"invalid label key: {problem}")
        if self.power_model.types and self.watts_per_core is None and self.idle_watts is None:
            yield PolicyIssue(
                "powerModel", "covers no dimension: set wattsPerCore or idleWatts as well"
            )
        if self.consolidation.weight > 0 and self.watts_per_core is None:
            yield PolicyIssue(
                "consolidation.weight",
                f"consolidates the composites that count wattsPerCore, which is not set "
                f"(weight {fmt(self.consolidation.weight)})",
            )
        if self.drain_candidates.enabled and self.watts_per_core is None:
            yield PolicyIssue(
                "drainCandidates.enabled",
                "needs wattsPerCore: a node is drained onto nodes whose cores cost no more",
            )
