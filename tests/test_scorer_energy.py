"""Energy as efficiency in the planner: watts per core and idle watts from Kepler or the power
model, consolidation (an "active" term, no hot-node penalty) and drain candidates."""

from __future__ import annotations

import pytest
from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from scorer.cycle.plan import CyclePlan, DataStatus, ScorerMemory, plan_cycle
from scorer.cycle.plan.drain import DrainNode, drain_candidates
from scorer.cycle.service import Scorer, plans_from_pods
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter
from scorer.explain.nodes import detail_view
from scorer.explain.render import node_text
from scorer.explain.view import Served
from scorer.model import NodeState
from scorer.watch.ledger import BoundPod
from steer.adapters.kubejson import KubeJson
from steer.core.budget import PodUsage
from steer.core.policy import Policy, PolicyError, parse_policy
from steer.core.steering import owned_label_keys, owned_resource_keys
from tests.scorer_support import apply_plan, readings_for

GIB = 1 << 30
T0 = 1_800_000_000.0
PREFIX = "kube-steer.github.io/"
DRAIN = f"{PREFIX}drain-candidate"
REASON = f"{PREFIX}drain-candidate-reason"
TYPE = "node.kubernetes.io/instance-type"

ENERGY_POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {name: energy}
spec:
  scoring: {step: 10, hysteresis: 0, hotPenaltyPerPod: 5, hotWindowSeconds: 60,
            compositeDimensions: [core-power, idle-power, health]}
  dimensions:
    - name: core-power
      query: q1
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      weight: 2
      ttlSeconds: 600
    - name: idle-power
      query: q2
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      weight: 1
    - name: health
      query: q3
      normalization: {method: fixed, min: 0, max: 1}
      weight: 2
    - name: gpu-util
      query: q4
      direction: lowerIsBetter
      normalization: {method: fixed, min: 0, max: 100}
      weight: 1
  podClasses:
    - name: gpu
      requestsAny: [nvidia.com/gpu]
      dimensions: [gpu-util, health]
  energy:
    wattsPerCore: core-power
    idleWatts: idle-power
    powerModel:
      types:
        efficient: {idleWatts: 100, wattsPerCore: 5}
        legacy: {idleWatts: 200, wattsPerCore: 10}
    consolidation: {weight: 1}
    drainCandidates: {enabled: true, minSavedWatts: 50}
"""
POLICY = parse_policy(ENERGY_POLICY)


def node(name: str, kind: str | None, cpu: str = "16", **extra: object) -> NodeState:
    labels = {TYPE: kind} if kind else {}
    return NodeState(
        name, labels=labels, allocatable={"cpu": cpu, "memory": "64Gi", "pods": "110"}, **extra
    )  # type: ignore[arg-type]


def pod(
    cores: float, gib: float = 2, *, movable: bool = True, replaced: bool = True, **held: int
) -> PodUsage:
    m = int(cores * 1000)
    return PodUsage(m, int(gib * GIB), m, int(gib * GIB), held, movable, replaced)


def health(nodes: list[NodeState]) -> dict[str, dict[str, float]]:
    return {"health": {n.name: 1.0 for n in nodes}}


def cycle(
    nodes: list[NodeState],
    pods: dict[str, list[PodUsage]],
    memory: ScorerMemory | None = None,
    at: float = T0,
    policy: Policy = POLICY,
) -> tuple[CyclePlan, ScorerMemory]:
    """One full cycle with every node healthy and no Kepler series (the powerModel's watts)."""
    readings = readings_for(policy, nodes, health(nodes), at)
    return plan_cycle(policy, nodes, readings, memory or ScorerMemory(), at, pod_usages=pods)


def test_the_power_model_covers_nodes_without_a_measurement_and_a_measurement_wins() -> None:
    cluster = [node("eff", "efficient"), node("leg", "legacy"), node("bare", None)]
    values = health(cluster) | {"core-power": {"leg": 8.0}}
    plan, memory = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0
    )
    core = {p.node: p.dimensions["core-power"] for p in plan.nodes}
    assert core["eff"].raw == 5.0 and core["leg"].raw == 8.0  # eff: model; leg: measured
    assert core["bare"].status is DataStatus.MISSING  # no measurement, no spec: no label
    # Lower watts per core is better: eff (5 W) scores 100, leg (8 W) 0.
    assert plan.node("eff").labels[f"{PREFIX}score-core-power"] == "100"  # type: ignore[union-attr]
    assert plan.node("leg").labels[f"{PREFIX}score-core-power"] == "0"  # type: ignore[union-attr]
    idle = {p.node: p.dimensions["idle-power"].raw for p in plan.nodes}
    assert idle == {"eff": 100.0, "leg": 200.0, "bare": None}

    # Later, leg is idle (no series): its last measurement holds within the TTL, not the model.
    later, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, health(cluster), T0 + 300), memory, T0 + 300
    )
    assert later.node("leg").dimensions["core-power"].raw == 8.0  # type: ignore[union-attr]
    # Past the TTL (600 s) the model takes over again.
    aged, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, health(cluster), T0 + 700), memory, T0 + 700
    )
    assert aged.node("leg").dimensions["core-power"].raw == 10.0  # type: ignore[union-attr]


def test_active_efficient_nodes_rank_first_and_the_hot_penalty_spares_the_energy_composite() -> (
    None
):
    cluster = [node(n, k) for n, k in (("e1", "efficient"), ("e2", "efficient"), ("l1", "legacy"))]
    cluster += [node("l2", "legacy")]
    pods = {"e1": [pod(2)], "l1": [pod(2)], "l2": [pod(1, movable=False)]}  # l2: a DaemonSet pod
    plan, _ = plan_cycle(
        POLICY,
        cluster,
        readings_for(POLICY, cluster, health(cluster) | {"gpu-util": {"e1": 0.0}}, T0),
        ScorerMemory(),
        T0,
        pod_usages=pods,
        hot={"e1": 4},  # four pods bound in the window: 20 points off, where the penalty applies
    )
    score = {p.node: p.labels[f"{PREFIX}score"] for p in plan.nodes}
    # (2 x core + 1 x idle + 2 x health + 1 x active) / 6, with core/idle 100 (efficient) or 0:
    # e1 (active) 100, e2 (idle) 500/6 = 83.3 → 80, l2 (only a DaemonSet pod: idle) 200/6 =
    # 33.3 → 30. l1 runs pods, but its cores cost the most: its active term is 100 less its
    # core score's distance to the cheapest (100), i.e. 0, and it ranks with the idle l2: its
    # pods pull no work onto it. No hot penalty on e1.
    assert score == {"e1": "100", "e2": "80", "l1": "30", "l2": "30"}
    assert [p.active for p in plan.nodes] == [True, False, True, False]
    e1 = plan.node("e1")
    assert e1 is not None
    by_key = {c.key: c for c in e1.composites}
    assert by_key[f"{PREFIX}score"].penalty == 0.0
    # The GPU class's composite does not count core-power: it keeps the penalty.
    assert by_key[f"{PREFIX}score-class-gpu"].penalty == 20.0


def test_without_consolidation_the_hot_penalty_applies_as_before() -> None:
    policy = parse_policy(ENERGY_POLICY.replace("consolidation: {weight: 1}", ""))
    cluster = [node("e1", "efficient"), node("l1", "legacy")]
    plan, _ = plan_cycle(
        policy,
        cluster,
        readings_for(policy, cluster, health(cluster), T0),
        ScorerMemory(),
        T0,
        pod_usages={"e1": [pod(2)]},
        hot={"e1": 4},
    )
    e1 = plan.node("e1")
    assert e1 is not None and e1.composites[0].penalty == 20.0
    assert e1.labels[f"{PREFIX}score"] == "80"  # (200 + 100 + 200) / 5 = 100, less 20


def test_a_node_whose_pods_fit_on_cheaper_active_nodes_is_marked_with_the_numbers() -> None:
    cluster = [node("e1", "efficient"), node("e2", "efficient"), node("l1", "legacy")]
    cluster += [node("l2", "legacy"), node("e3", "efficient")]
    pods = {
        "e1": [pod(10)],  # 6 cores free
        "e2": [pod(12)],  # 4 cores free: the emptier e1 is tried first
        "l1": [pod(3, 4), pod(2, 2), pod(1, movable=False)],  # 5 movable cores
        "l2": [pod(8)],  # 8 cores: no room left on the efficient active nodes
        # e3 is idle: never a target (waking it is what draining avoids)
    }
    plan, memory = cycle(cluster, pods)
    marked = {p.node: p.drain_reason for p in plan.nodes if p.drain_reason}
    assert list(marked) == ["l1"]
    assert marked["l1"] == (
        "its 2 movable pods (5 cores, 6 GiB requested) fit on 1 active node (e1) at 5 W per "
        "busy core against 10 W here; emptying it saves about 225 W (200 W idle)"
    )
    l1 = plan.node("l1")
    assert l1 is not None
    assert l1.labels[DRAIN] == "true" and l1.annotation_changes[REASON] == marked["l1"]
    assert DRAIN in owned_label_keys(POLICY)
    assert memory.drain == marked

    # Written, then a pod event replans l1 alone: the mark of the last full cycle stays.
    written = apply_plan(POLICY, cluster, plan)
    l1_node = next(n for n in written if n.name == "l1")
    refresh, _ = plan_cycle(
        POLICY, [l1_node], {}, memory, T0 + 1, pod_usages=pods, known=[n.name for n in cluster]
    )
    again = refresh.node("l1")
    assert again is not None and again.drain_reason == marked["l1"]
    assert DRAIN not in again.label_changes and REASON not in again.annotation_changes

    # The pods moved away: the next full cycle takes the mark and its reason off.
    moved = dict(pods, l1=[pod(1, movable=False)], e1=[pod(15)])
    after, _ = cycle(written, moved, memory, at=T0 + 30)
    gone = after.node("l1")
    assert gone is not None and gone.drain_reason is None
    assert gone.label_changes[DRAIN] is None and gone.annotation_changes[REASON] is None

    # The node detail of /explain says it, in JSON and in text.
    view = detail_view(POLICY, plan, "l1")
    assert view is not None and view.to_json()["drainCandidate"] == marked["l1"]
    assert view.to_json()["active"] is True
    served = Served(leader=True)
    assert f"drain candidate: {marked['l1']}" in node_text(view, served)


def test_drain_candidates_skip_what_must_stay() -> None:
    base = dict(cpu_m=16000, memory=64 * GIB, idle_watts=200.0)
    target = DrainNode("t", watts_per_core=5.0, pods=[pod(2)], **base)  # type: ignore[arg-type]

    def marked(**kw: object) -> dict[str, str]:
        cand = DrainNode(**(dict(name="c", watts_per_core=10.0, pods=[pod(2)]) | base | kw))  # type: ignore[arg-type]
        return drain_candidates([target, cand])

    assert list(marked()) == ["c"]
    assert marked(scale_down_disabled=True) == {}  # the user's autoscaler switch
    assert marked(schedulable=False) == {}  # cordoned: someone is already on it
    assert marked(pinned=("nvidia.com/gpu",)) == {}  # a GPU job: moving it is not ours to plan
    assert marked(pods=[pod(1, movable=False)]) == {}  # only infrastructure: nothing to move
    # A bare pod: evicted, nothing makes it again (the autoscaler refuses such nodes too).
    assert marked(pods=[pod(1), pod(1, replaced=False)]) == {}
    assert marked(pods=[pod(15)]) == {}  # does not fit
    assert "c" not in marked(watts_per_core=4.0)  # the target's cores cost more (t drains)
    assert marked(watts_per_core=None) == {}  # cost unknown
    # Equally efficient: only into a fuller node, so of two twins one drains, never both.
    assert list(marked(watts_per_core=5.0, pods=[pod(1)])) == ["c"]
    assert list(marked(watts_per_core=5.0, pods=[pod(3)])) == ["t"]  # the lighter one drains
    # Not worth it below minSavedWatts.
    costly = DrainNode("c", watts_per_core=10.0, pods=[pod(2)], **base)  # type: ignore[arg-type]
    assert list(drain_candidates([target, costly], 200)) == ["c"]  # saves 200 + 2 x 5 W
    assert drain_candidates([target, costly], 300) == {}


def test_at_most_max_candidates_are_marked_the_costliest_first() -> None:
    base = dict(cpu_m=64000, memory=256 * GIB, idle_watts=200.0)
    big = DrainNode("big", watts_per_core=5.0, pods=[pod(1)], **base)  # type: ignore[arg-type]
    small = [
        DrainNode(f"n{i:02d}", watts_per_core=12.0 if i >= 12 else 10.0, pods=[pod(1)], **base)  # type: ignore[arg-type]
        for i in range(15)
    ]
    marked = drain_candidates([big, *small], 50, max_marked=10)
    assert list(marked) == ["n12", "n13", "n14", *(f"n{i:02d}" for i in range(7))]
    # From the policy: maxCandidates (default 10).
    assert POLICY.spec.energy.drain_candidates.max_candidates == 10


def test_daemonset_and_mirror_pods_are_not_movable_in_the_ledger() -> None:
    spec = {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]}
    ds_owner = {
        "kind": "DaemonSet",
        "name": "x",
        "uid": "u",
        "controller": True,
        "apiVersion": "v1",
    }
    daemon = BoundPod.of({"metadata": {"ownerReferences": [ds_owner]}, "spec": spec})
    mirror = BoundPod.of(
        {"metadata": {"annotations": {"kubernetes.io/config.mirror": "h"}}, "spec": spec}
    )
    plain = BoundPod.of({"metadata": {}, "spec": spec})
    rs_owner = dict(ds_owner, kind="ReplicaSet", apiVersion="apps/v1")
    replicated = BoundPod.of({"metadata": {"ownerReferences": [rs_owner]}, "spec": spec})
    not_controller = dict(rs_owner, controller=False)
    referenced = BoundPod.of({"metadata": {"ownerReferences": [not_controller]}, "spec": spec})
    assert daemon is not None and not daemon.usage.movable
    assert mirror is not None and not mirror.usage.movable
    assert plain is not None and plain.usage.movable and plain.usage.request_cpu_m == 1000
    # Only a controller makes an evicted pod again: a bare pod, or one merely owned, is not.
    assert not plain.usage.replaced
    assert replicated is not None and replicated.usage.movable and replicated.usage.replaced
    assert referenced is not None and not referenced.usage.replaced


def test_turning_drain_candidates_off_removes_the_mark() -> None:
    cluster = [node("e1", "efficient"), node("l1", "legacy")]
    pods = {"e1": [pod(2)], "l1": [pod(2)]}
    plan, memory = cycle(cluster, pods)
    written = apply_plan(POLICY, cluster, plan)
    l1 = next(n for n in written if n.name == "l1")
    assert l1.labels[DRAIN] == "true" and REASON in l1.annotations
    off = parse_policy(ENERGY_POLICY.replace("enabled: true", "enabled: false"))
    after, _ = cycle(written, pods, memory, at=T0 + 30, policy=off)
    gone = after.node("l1")
    assert gone is not None
    assert gone.label_changes.get(DRAIN, "kept") is None
    assert gone.annotation_changes[REASON] is None


def test_the_mark_rides_on_the_nodes_one_label_write(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """No request of its own: the label and its reason go in the node's one merge patch, and a
    cycle that changes nothing writes nothing."""
    for name, kind in (("e1", "efficient"), ("l1", "legacy")):
        apistub.add_node(synthetic_node(name, cpu="16", memory="64Gi", labels={TYPE: kind}))
    api = NodeApi(KubeJson(kube_client))
    nodes = api.list_nodes()
    pods = {"e1": [pod(2)], "l1": [pod(2)]}
    plan, memory = cycle(nodes, pods)
    apistub.clear_requests()
    NodeWriter(api, RateLimiter(1000, 1000), sleep=lambda _s: None).apply(POLICY, plan, nodes)
    patches = [r for r in apistub.requests if r.method == "PATCH" and "/status" not in r.path]
    assert len([r for r in patches if r.path.endswith("/l1")]) == 1
    l1 = apistub.get("nodes", "l1")["metadata"]
    assert l1["labels"][DRAIN] == "true"
    assert l1["annotations"][REASON].startswith("its 1 movable pod (2 cores, 2 GiB requested)")
    assert DRAIN not in apistub.get("nodes", "e1")["metadata"]["labels"]

    nodes = api.list_nodes()
    again, _ = cycle(nodes, pods, memory, at=T0 + 30)
    assert not any(p.changed for p in again.nodes)


def test_with_descheduling_consolidation_a_drain_candidate_is_also_tainted_prefer_no_schedule() -> (
    None
):
    """The descheduler's consolidation profile keys on this taint (steer/core/descheduling.py),
    and it keeps new pods elsewhere; without consolidation, or in audit mode, no taint."""
    cluster = [node("e1", "efficient"), node("l1", "legacy")]
    pods = {"e1": [pod(2)], "l1": [pod(2)]}
    untainted, _ = cycle(cluster, pods)
    l1 = untainted.node("l1")
    assert l1 is not None and l1.drain_reason is not None and l1.taints == ()

    consolidating = parse_policy(
        ENERGY_POLICY + "  descheduling:\n    consolidation: {enabled: true}\n"
    )
    plan, memory = cycle(cluster, pods, policy=consolidating)
    l1 = plan.node("l1")
    assert l1 is not None and l1.drain_reason is not None
    assert [(t.key, t.value, t.effect) for t in l1.taints] == [(DRAIN, "true", "PreferNoSchedule")]
    e1 = plan.node("e1")
    assert e1 is not None and e1.taints == ()

    # The pods moved away: the next full cycle takes the taint off with the mark.
    written = apply_plan(consolidating, cluster, plan)
    assert any(t.key == DRAIN for t in next(n for n in written if n.name == "l1").taints)
    moved = {"e1": [pod(4)], "l1": []}
    after, _ = cycle(written, moved, memory, at=T0 + 30, policy=consolidating)
    gone = after.node("l1")
    assert gone is not None and gone.drain_reason is None and gone.taints == ()
    assert [t.key for t in gone.current_taints] == [DRAIN]

    audit = parse_policy(
        ENERGY_POLICY.replace("spec:\n", "spec:\n  mode: audit\n", 1)
        + "  descheduling:\n    consolidation: {enabled: true}\n"
    )
    audited, _ = cycle(cluster, pods, policy=audit)
    l1 = audited.node("l1")
    assert l1 is not None and l1.drain_reason is not None and l1.taints == ()


def test_without_a_pod_watch_the_scorer_lists_the_pods_an_energy_policy_plans_from(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    """`steer scorer once` keeps no pod watch: for a policy with no gate or pool it still lists
    the bound pods when consolidation or drain candidates count them, so one cycle marks the
    legacy node. Prometheus is unreachable here: the power model alone gives the watts."""
    for name, kind in (("e1", "efficient"), ("l1", "legacy")):
        apistub.add_node(synthetic_node(name, cpu="16", memory="64Gi", labels={TYPE: kind}))
    for name, where in (("a", "e1"), ("b", "l1")):
        resources = {"cpu": "2", "memory": "2Gi"}
        container = {"name": "c", "image": "x", "resources": {"requests": resources}}
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}
        metadata = {"name": name, "ownerReferences": [dict(owner, controller=True)]}
        apistub.create(
            "pods", {"metadata": metadata, "spec": {"nodeName": where, "containers": [container]}}
        )
    consolidating = parse_policy(
        ENERGY_POLICY + "  descheduling:\n    consolidation: {enabled: true}\n"
    )
    assert plans_from_pods(consolidating) and not owned_resource_keys(consolidating)
    scorer = Scorer(
        lambda: consolidating, NodeApi(KubeJson(kube_client)), prometheus_url="http://127.0.0.1:1"
    )
    try:
        result = scorer.run_cycle()
    finally:
        scorer.close()
    assert {p.node: p.active for p in result.plan.nodes} == {"e1": True, "l1": True}
    l1 = apistub.get("nodes", "l1")
    assert l1["metadata"]["labels"][DRAIN] == "true"
    assert l1["metadata"]["annotations"][REASON].startswith(
        "its 1 movable pod (2 cores, 2 GiB requested) fits on 1 active node (e1)"
    )
    assert [(t["key"], t["effect"]) for t in l1["spec"]["taints"]] == [(DRAIN, "PreferNoSchedule")]
    assert DRAIN not in apistub.get("nodes", "e1")["metadata"]["labels"]


def test_consolidation_without_drain_candidates_is_refused_with_its_path() -> None:
    text = ENERGY_POLICY.replace(
        "drainCandidates: {enabled: true, minSavedWatts: 50}", "drainCandidates: {enabled: false}"
    )
    with pytest.raises(PolicyError) as caught:
        parse_policy(text + "  descheduling:\n    consolidation: {enabled: true}\n")
    assert [i.path for i in caught.value.issues] == ["spec.descheduling.consolidation.enabled"]


def test_consolidation_never_pulls_work_onto_costlier_cores() -> None:
    """The consolidation term of an active node is 100 less how far its cores' score falls
    below the cheapest cores': equal nodes consolidate in full, a hungry node's pods earn it
    nothing over an idle efficient node, a node whose cores are unmeasured (no model figure)
    while others' are is neutral (50), and where none is measured all active nodes are equal."""
    policy = parse_policy(
        ENERGY_POLICY.replace(
            """    powerModel:
      types:
        efficient: {idleWatts: 100, wattsPerCore: 5}
        legacy: {idleWatts: 200, wattsPerCore: 10}
""",
            "",
        )
    )
    cluster = [node(n, None) for n in ("e1", "e2", "l1", "u1", "u2")]
    pods = {"e1": [pod(2)], "l1": [pod(2)], "u1": [pod(2)]}
    values = health(cluster) | {
        "core-power": {"e1": 5.0, "e2": 5.0, "l1": 10.0},
        "idle-power": dict.fromkeys(("e1", "e2", "l1", "u1", "u2"), 150.0),
    }
    plan, _ = plan_cycle(
        policy,
        cluster,
        readings_for(policy, cluster, values, T0),
        ScorerMemory(),
        T0,
        pod_usages=pods,
    )
    score = {p.node: int(p.labels[f"{PREFIX}score"]) for p in plan.nodes}
    # idle-power is the same everywhere (50). e1: (200 + 50 + 200 + 100) / 6 = 91.7 → 90;
    # e2 idle: 450 / 6 = 75 → 80; l1 active, costliest cores: (0 + 50 + 200 + 0) / 6 = 41.7
    # → 40; u1 active, unmeasured (core-power left out): (50 + 200 + 50) / 4 = 75 → 80; u2 idle,
    # unmeasured: 250 / 4 = 62.5 → 60.
    assert score == {"e1": 90, "e2": 80, "l1": 40, "u1": 80, "u2": 60}
    assert score["e2"] > score["l1"]

    # Nothing measured anywhere: consolidation among what is measured, in full.
    values = health(cluster) | {"idle-power": dict.fromkeys(("e1", "e2", "l1", "u1", "u2"), 150.0)}
    plan, _ = plan_cycle(
        policy,
        cluster,
        readings_for(policy, cluster, values, T0),
        ScorerMemory(),
        T0,
        pod_usages=pods,
    )
    score = {p.node: int(p.labels[f"{PREFIX}score"]) for p in plan.nodes}
    # active: (50 + 200 + 100) / 4 = 87.5 → 90; idle: 250 / 4 = 62.5 → 60
    assert score == {"e1": 90, "e2": 60, "l1": 90, "u1": 90, "u2": 60}

    # Equal cores everywhere (one distinct value scores 50 on every node): full credit.
    values = health(cluster) | {"core-power": dict.fromkeys(("e1", "e2", "l1", "u1", "u2"), 7.0)}
    plan, _ = plan_cycle(
        policy,
        cluster,
        readings_for(policy, cluster, values, T0),
        ScorerMemory(),
        T0,
        pod_usages=pods,
    )
    score = {p.node: int(p.labels[f"{PREFIX}score"]) for p in plan.nodes}
    # active: (100 + 200 + 100) / 5 = 80; idle: 300 / 5 = 60
    assert score == {"e1": 80, "e2": 60, "l1": 80, "u1": 80, "u2": 60}


def test_idle_watts_are_scored_per_allocatable_core_and_shown_whole() -> None:
    """What waking a node costs is scored per core it brings: a 64-core GPU server idling at
    800 W ranks near an efficient 16-core node (120 W), not below a power-hungry one (220 W),
    so GPU servers no longer squeeze the two CPU kinds into one bucket. The raw value stays
    watts, and a replan of one node scores it against the cores the others had."""
    cluster = [node("eff", None), node("leg", None), node("gpu", None, cpu="64")]
    values = health(cluster) | {"idle-power": {"eff": 120.0, "leg": 220.0, "gpu": 800.0}}
    plan, memory = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0
    )
    idle = {p.node: p.dimensions["idle-power"] for p in plan.nodes}
    assert {n: d.raw for n, d in idle.items()} == {"eff": 120.0, "leg": 220.0, "gpu": 800.0}
    # 7.5, 13.75 and 12.5 W per core: eff 100, gpu 20, leg 0 (whole watts: 100, 85, 0).
    assert {n: d.label for n, d in idle.items()} == {"eff": "100", "leg": "0", "gpu": "20"}
    assert memory.cores == {"eff": 16.0, "leg": 16.0, "gpu": 64.0}

    replan, _ = plan_cycle(
        POLICY,
        [cluster[1]],
        readings_for(POLICY, cluster, values, T0 + 1),
        memory,
        T0 + 1,
        known=[n.name for n in cluster],
    )
    assert replan.node("leg").dimensions["idle-power"].label == "0"  # type: ignore[union-attr]
