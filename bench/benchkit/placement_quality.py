"""Placement quality of a scheduler-bench run: how good, by the scorer's own label, the nodes
the run's pods were bound to are, among the nodes that could have taken them.

A steered pod prefers nodes by binary-weighted `In` terms on one composite score label
(`<prefix>score` or `<prefix>score-class-<class>`, 0..100 in buckets of 10): that label is the
policy's verdict on a node, so it is the yardstick. A run is judged by the label its shape's
steered pod prefers; a twin too, by the same label, for reference (where the same pod lands
unsteered). A lever that scores fewer nodes (percentageOfNodesToScore) shows as pods landing
below the best bucket. The label is not all the steered pod prefers: its other preferred
terms (a non-GPU pod's "not reserved for GPU pods", weight 110) may rightly pull it off the
best bucket, so the whole preference is judged too: the share of pods on a node where the
steered pod's preferred terms sum to the most (NodeAffinity's raw score).

Eligible nodes are an approximation, from one snapshot of the nodes taken after the scorer
wrote them (its labels, taints and status resources do not change during the bench):

- counted: the node's allocatable covers the run pod's requests, every resource of it
  (`nvidia.com/gpu` for the GPU shape, the policy's pools and gates, cpu, memory); the pod
  tolerates the node's NoSchedule and NoExecute taints (the scorer's `unhealthy`); the node is
  not cordoned. Kubernetes' own rules, from steer.core.scheduling; a hard hostname spread
  constraint (a-chain's) caps a node at its maxSkew pods of the run: the run's pods all match
  it, and while some eligible node holds none (4,752 nodes, 2,000 pods) the minimum is 0;
- not counted: what the run's own pods use up as they bind (the ceilings say how many pods
  the best nodes hold), required node affinity and nodeSelector (the bench's pods set none),
  other topology spread (a-chain's hard zone spread caps the pods one zone may take), and all else
  the scheduler weighs beside node affinity (spreading, allocation, taints it merely prefers
  to avoid).

Pure: nodes and pods as the API serves them in, frozen dataclasses out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

from steer.core.pod_shape import pod_spec_of, preferred_terms, tolerations_of
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import Taint, blocking_taints, pod_requests, term_matches

BUCKET_STEP = 10  # the scorer's label buckets: 0, 10, ..., 100
PODS = "pods"  # the allocatable that caps how many pods a node holds, whatever they request
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True)
class Yardstick:
    """What a shape's runs are judged by: the score label its steered pod prefers and all of
    that pod's preferred node-affinity terms."""

    key: str
    terms: tuple[Mapping[str, Any], ...]

    def label_keys(self) -> set[str]:
        """Every node label the judgement reads."""
        keys = {self.key}
        for term in self.terms:
            for expression in (term.get("preference") or {}).get("matchExpressions") or ():
                keys.add(str(expression.get("key", "")))
        return keys


def yardstick(steered: Mapping[str, Any], label_prefix: str) -> Yardstick | None:
    """The yardstick of a steered pod: the first key of its preferred terms under the policy's
    label prefix with `score` in it; None for a pod that prefers no score label."""
    terms = preferred_terms(pod_spec_of(steered))
    for term in terms:
        for expression in (term.get("preference") or {}).get("matchExpressions") or ():
            key = str(expression.get("key", ""))
            if key.startswith(label_prefix) and "score" in key.removeprefix(label_prefix):
                return Yardstick(key, tuple(terms))
    return None


@dataclass(frozen=True)
class NodeRoom:
    """What decides whether a pod fits a node: its allocatable and its blocking taints."""

    allocatable: Mapping[str, Fraction]
    taints: tuple[Taint, ...]  # NoSchedule and NoExecute only: the others do not filter
    unschedulable: bool


@dataclass(frozen=True)
class FleetSnapshot:
    """The nodes as the scorer left them: per node its room and the labels judged by."""

    rooms: Mapping[str, NodeRoom]
    labels: Mapping[str, Mapping[str, str]]  # node -> the kept labels it carries

    def scores(self, key: str) -> dict[str, int]:
        """Per node carrying the label `key` with an integer value, that value."""
        out = {}
        for node, labels in self.labels.items():
            value = labels.get(key)
            if value is not None and value.isdigit():
                out[node] = int(value)
        return out


def fleet_snapshot(nodes: Iterable[Mapping[str, Any]], keys: Collection[str]) -> FleetSnapshot:
    """What placement quality needs of the listed nodes: their room, and their labels among
    `keys` (those the yardsticks read), nothing else."""
    rooms: dict[str, NodeRoom] = {}
    kept: dict[str, dict[str, str]] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        kept[name] = {k: v for k, v in labels.items() if k in keys}
        spec = node.get("spec") or {}
        allocatable = {}
        for resource, amount in ((node.get("status") or {}).get("allocatable") or {}).items():
            try:
                allocatable[resource] = parse_quantity(amount)
            except QuantityError:
                continue  # an unreadable resource is as good as absent: nothing fits it
        taints = tuple(Taint.from_k8s(t) for t in spec.get("taints") or ())
        rooms[name] = NodeRoom(
            allocatable, tuple(t for t in taints if t.blocks), bool(spec.get("unschedulable"))
        )
    return FleetSnapshot(rooms, kept)


def pods_that_fit(room: NodeRoom, requests: Mapping[str, Fraction]) -> int:
    """How many pods with these requests an empty node holds: the fewest by any resource
    requested, and by its `pods` allocatable (absent: no cap there)."""
    counts = [
        math.floor(room.allocatable.get(resource, Fraction(0)) / amount)
        for resource, amount in requests.items()
        if amount > 0
    ]
    if PODS in room.allocatable:
        counts.append(math.floor(room.allocatable[PODS]))
    return max(0, min(counts)) if counts else 1


def eligible_room(fleet: FleetSnapshot, pod: Mapping[str, Any]) -> dict[str, int]:
    """Per node that could take the pod (see the module docstring: an approximation), how many
    such pods it holds when empty. Nodes that could not take one are left out."""
    spec = pod_spec_of(pod)
    requests = pod_requests(spec)
    tolerations = tolerations_of(spec)
    per_host = [
        c["maxSkew"]
        for c in spec.get("topologySpreadConstraints") or ()
        if c.get("topologyKey") == HOSTNAME and c.get("whenUnsatisfiable") == "DoNotSchedule"
    ]
    out = {}
    for name, room in fleet.rooms.items():
        if blocking_taints(tolerations, room.taints, unschedulable=room.unschedulable):
            continue
        fits = min([pods_that_fit(room, requests), *per_host])
        if fits > 0:
            out[name] = fits
    return out


def preference_scores(fleet: FleetSnapshot, terms: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Per node, the sum of the weights of the preferred terms it matches: NodeAffinity's raw
    score, before normalisation (which keeps the order)."""
    return {
        node: sum(t["weight"] for t in terms if term_matches(t["preference"], labels, node))
        for node, labels in fleet.labels.items()
    }


# The shares a PlacementQuality holds, and the ceilings beside them (fractions of the pods bound).
SHARES = (
    "best_share",
    "top2_share",
    "best_ceiling",
    "top2_ceiling",
    "preferred_share",
    "preferred_ceiling",
)


@dataclass(frozen=True)
class PlacementQuality:
    """Where a run's pods were bound, judged by a yardstick.

    Shares are of the bound pods. A ceiling is the most a share could be: the room the nodes
    in question have for the run's pod (when empty), over the pods bound, at most 1.
    `off_eligible` counts pods bound on a node this approximation calls ineligible or that
    carries no value of the label (a check on the approximation: 0 expected).
    """

    key: str
    pods: int
    eligible_nodes: int
    best_score: int  # the best bucket of the label among the eligible nodes
    best_nodes: int  # eligible nodes in it
    best_share: float  # pods on a node of the best bucket
    top2_share: float  # pods on a node of the best two buckets (score >= best - step)
    best_ceiling: float
    top2_ceiling: float
    mean_bound_score: float | None  # over the bound pods on a labelled node (None: none)
    mean_eligible_score: float  # over the eligible labelled nodes, each once
    preferred_share: float  # pods on an eligible node the preferred terms score most
    preferred_ceiling: float
    off_eligible: int

    def to_json(self) -> dict[str, Any]:
        """The results file's form: shares to 3 decimals, mean scores to 1."""
        out = asdict(self)
        for name in SHARES:
            out[name] = round(out[name], 3)
        for name in ("mean_bound_score", "mean_eligible_score"):
            if out[name] is not None:
                out[name] = round(out[name], 1)
        return out


def share_at_least(
    values: Mapping[str, int], room: Mapping[str, int], bound: Sequence[str], floor: int
) -> tuple[float, float]:
    """The share of the bound pods on an eligible node valued at least `floor`, and its
    ceiling (those nodes' room over the pods bound, at most 1)."""
    held = sum(room[n] for n, value in values.items() if value >= floor and n in room)
    on = sum(1 for n in bound if n in room and values.get(n, floor - 1) >= floor)
    return on / len(bound), min(1.0, held / len(bound))


def judge_placement(
    key: str,
    scores: Mapping[str, int],
    preference: Mapping[str, int],
    room: Mapping[str, int],
    bound: Sequence[str],
    step: int = BUCKET_STEP,
) -> PlacementQuality | None:
    """The quality of the placements `bound` (one node name per bound pod) by the label `key`
    (`scores`: node -> its value) and the steered pod's preferred terms (`preference`: node ->
    raw NodeAffinity score), among the eligible nodes `room` (node -> pods it holds). None when
    no pod was bound or no eligible node carries the label."""
    eligible = {node: scores[node] for node in room if node in scores}
    if not bound or not eligible:
        return None
    best = max(eligible.values())
    best_share, best_ceiling = share_at_least(eligible, room, bound, best)
    top2_share, top2_ceiling = share_at_least(eligible, room, bound, best - step)
    preferred = {node: preference.get(node, 0) for node in room}
    preferred_share, preferred_ceiling = share_at_least(
        preferred, room, bound, max(preferred.values())
    )
    bound_scores = [scores[n] for n in bound if n in scores]
    return PlacementQuality(
        key=key,
        pods=len(bound),
        eligible_nodes=len(eligible),
        best_score=best,
        best_nodes=sum(1 for score in eligible.values() if score == best),
        best_share=best_share,
        top2_share=top2_share,
        best_ceiling=best_ceiling,
        top2_ceiling=top2_ceiling,
        mean_bound_score=statistics.fmean(bound_scores) if bound_scores else None,
        mean_eligible_score=statistics.fmean(eligible.values()),
        preferred_share=preferred_share,
        preferred_ceiling=preferred_ceiling,
        off_eligible=sum(1 for n in bound if n not in eligible),
    )


class PlacementJudge:
    """Judges a size's runs against one snapshot of its nodes; per yardstick, the label values
    and preference scores are computed once."""

    def __init__(self, fleet: FleetSnapshot) -> None:
        self.fleet = fleet
        self._scores: dict[str, dict[str, int]] = {}
        self._preference: dict[str, dict[str, int]] = {}  # by the terms' repr

    def judge(
        self, stick: Yardstick, pod: Mapping[str, Any], bound: Sequence[str]
    ) -> PlacementQuality | None:
        """A run's placement quality: `pod` is the run's pod (its requests and tolerations
        decide the eligible nodes), `bound` the node of each pod bound."""
        if stick.key not in self._scores:
            self._scores[stick.key] = self.fleet.scores(stick.key)
        terms = repr(stick.terms)
        if terms not in self._preference:
            self._preference[terms] = preference_scores(self.fleet, stick.terms)
        room = eligible_room(self.fleet, pod)
        return judge_placement(
            stick.key, self._scores[stick.key], self._preference[terms], room, bound
        )
