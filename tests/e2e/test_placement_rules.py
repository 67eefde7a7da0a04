"""The placement rules of the example policy, on the real kube-scheduler with the steer profiles:

- `reserveNodes: prefer` keeps CPU pods off GPU nodes (the scorer's `reserved-for-gpu` label)
  even when the GPU nodes score best, yet places them there when nothing else fits;
- the order chain's zone spread (`DoNotSchedule`) holds against a preference that pulls every
  replica into one zone (a `ScheduleAnyway` constraint loses to it: measured for contrast);
- its host spread caps the replicas on a node against the same pull, and a zone the scorer
  tainted `unhealthy` is left out of both (`nodeTaintsPolicy: Honor`), where the Kubernetes
  default would hold the other zones to its count and leave replicas Pending;
- GPU jobs pack onto one GPU node, CPU overflow goes to the GPU node whose GPUs are busy from
  outside (the scorer does not reserve a node the class avoids), and whole GPU nodes stay free
  for whole-node jobs, which then bind.

Pods carry what the webhook injects, built by the same core functions (steer/core/steering.py,
steer/core/mutation.py), and are confined to this test's nodes by a node-set label.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from kubernetes import client

from kits.control_plane import ControlPlane
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.model import NodeState
from steer.core.mutation import spread_constraint
from steer.core.policy import parse_policy
from steer.core.steering import (
    class_preferences,
    composite_key,
    condition_key,
    pod_gates,
    reserved_key,
)
from tests.e2e.test_scheduler import (
    SET_KEY,
    bare_pod,
    pod_template,
    wait_bound,
)
from tests.scorer_support import readings_for

from .conftest import ROOT

POLICY = parse_policy((ROOT / "examples" / "policy.yaml").read_text())
GPU_CLASS = POLICY.spec.pod_classes[0]
SCORE = composite_key(POLICY, None)
RESERVED = reserved_key(POLICY, GPU_CLASS)


def _cpu_pod_terms() -> list[dict[str, Any]]:
    return [t.to_k8s() for t in class_preferences(POLICY, None)]


def test_cpu_pods_stay_off_reserved_gpu_nodes_until_nothing_else_fits(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any
) -> None:
    assert GPU_CLASS.reserve_nodes == "prefer"
    set_id = f"res-{uuid.uuid4().hex[:6]}"
    for i in range(3):  # idle GPU nodes score best for every pod
        make_node(
            f"{set_id}-gpu-{i}",
            cpu="64",
            memory="256Gi",
            gpus=8,
            labels={SET_KEY: set_id, SCORE: "100", RESERVED: "true"},
        )
    for i in range(2):  # small CPU nodes, worst bucket
        make_node(f"{set_id}-cpu-{i}", cpu="4", memory="16Gi", labels={SET_KEY: set_id, SCORE: "0"})
    ns = make_namespace(prefix="res")
    core = client.CoreV1Api(control_plane.api_client())
    template = pod_template(
        set_id,
        "steer-spread",
        labels={"app": "svc"},
        preferred=_cpu_pod_terms(),
        requests={"cpu": "1", "memory": "1Gi"},
    )
    names = [f"svc-{i}" for i in range(8)]
    for name in names[:6]:
        core.create_namespaced_pod(ns, bare_pod(name, template))
        wait_bound(control_plane, ns, [name])
    placed = wait_bound(control_plane, ns, names[:6])
    # 8 cores of CPU nodes hold the first 6 one-core pods: none went to the GPU nodes.
    assert all("-cpu-" in node for node in placed.values()), placed
    # Fill the CPU nodes; then the reservation yields (prefer, not require).
    for name in names[6:]:
        core.create_namespaced_pod(ns, bare_pod(name, template))
    placed = wait_bound(control_plane, ns, names)
    assert all("-cpu-" in node for node in placed.values()), placed  # 8 pods, 8 cores
    core.create_namespaced_pod(ns, bare_pod("overflow", template))
    assert "-gpu-" in wait_bound(control_plane, ns, ["overflow"])["overflow"]


def _chain_replicas(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any, when: str
) -> Counter[str]:
    set_id = f"chain-{uuid.uuid4().hex[:6]}"
    zones = ("zone-a", "zone-b", "zone-c")
    for zone in zones:
        for i in range(2):
            make_node(
                f"{set_id}-{zone}-{i}",
                cpu="32",
                memory="128Gi",
                zone=zone,
                # zone-a scores best: the preference pulls every replica there.
                labels={SET_KEY: set_id, SCORE: "100" if zone == "zone-a" else "10"},
            )
    ns = make_namespace(prefix="chain")
    core = client.CoreV1Api(control_plane.api_client())
    labels = {"order-chain": "checkout", "pod-template-hash": "abc123"}
    zone_rule = next(r for r in POLICY.spec.spread if r.topology_key.endswith("/zone"))
    constraint = spread_constraint(zone_rule, labels)
    assert constraint is not None
    constraint["whenUnsatisfiable"] = when
    template = pod_template(set_id, "steer-spread", labels=labels, preferred=_cpu_pod_terms())
    template["spec"]["topologySpreadConstraints"] = [constraint]
    names = [f"chain-{i}" for i in range(9)]
    for name in names:
        core.create_namespaced_pod(ns, bare_pod(name, template))
    placed = wait_bound(control_plane, ns, names)
    nodes = {n: n.rsplit("-", 1)[0][len(set_id) + 1 :] for n in placed.values()}
    return Counter(nodes[node] for node in placed.values())


def test_order_chain_zone_spread_holds_against_the_preference(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any, record_property: Any
) -> None:
    zone_rule = next(r for r in POLICY.spec.spread if r.topology_key.endswith("/zone"))
    assert zone_rule.when_unsatisfiable == "DoNotSchedule"
    hard = _chain_replicas(control_plane, make_node, make_namespace, "DoNotSchedule")
    assert sum(hard.values()) == 9
    assert max(hard.values()) - min(hard.get(z, 0) for z in ("zone-a", "zone-b", "zone-c")) <= 1
    soft = _chain_replicas(control_plane, make_node, make_namespace, "ScheduleAnyway")
    record_property("schedule_anyway_zones", dict(soft))


def _placed_or_unschedulable(
    core: client.CoreV1Api, namespace: str, names: list[str], timeout: float = 30.0
) -> dict[str, str | None]:
    """Pod name -> its node, or None once the scheduler has found it Unschedulable."""
    done: dict[str, str | None] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(done) < len(names):
        for pod in core.list_namespaced_pod(namespace).items:
            if pod.spec.node_name:
                done[pod.metadata.name] = pod.spec.node_name
            elif any(
                c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                for c in pod.status.conditions or ()
            ):
                done[pod.metadata.name] = None
        time.sleep(0.3)
    assert len(done) == len(names), f"neither bound nor unschedulable: {set(names) - set(done)}"
    return done


def test_order_chain_caps_replicas_per_host_and_leaves_a_tainted_zone_out(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any
) -> None:
    """Three zones of two nodes; zone-c tainted `unhealthy` (NoSchedule, as the scorer taints),
    one node of zone-a scoring best. Eight replicas with the example's two spread rules: zone-c
    is no domain, so zones a and b take four each, and no node more than the host rule's
    maxSkew above the least loaded usable node, however hard the preference pulls. The same
    replicas with the Kubernetes default (`nodeTaintsPolicy` unset): zone-c counts with 0
    replicas, and only one replica per other zone binds."""
    rules = {r.topology_key: r for r in POLICY.spec.spread}
    zone_rule, host_rule = rules["topology.kubernetes.io/zone"], rules["kubernetes.io/hostname"]
    assert zone_rule.when_unsatisfiable == host_rule.when_unsatisfiable == "DoNotSchedule"
    assert zone_rule.node_taints_policy == host_rule.node_taints_policy == "Honor"
    unhealthy = POLICY.taint_rule("unhealthy")
    assert unhealthy.effect == "NoSchedule"
    taint = {"key": condition_key(POLICY, unhealthy), "value": "true", "effect": "NoSchedule"}
    set_id = f"hosts-{uuid.uuid4().hex[:6]}"
    zone_of: dict[str, str] = {}
    for zone in ("zone-a", "zone-b", "zone-c"):
        for i in range(2):
            name = f"{set_id}-{zone}-{i}"
            zone_of[name] = zone
            make_node(
                name,
                cpu="32",
                memory="128Gi",
                zone=zone,
                labels={SET_KEY: set_id, SCORE: "100" if (zone, i) == ("zone-a", 0) else "10"},
                taints=[taint] if zone == "zone-c" else (),
            )
    core = client.CoreV1Api(control_plane.api_client())
    labels = {"order-chain": "checkout", "pod-template-hash": "abc123"}
    template = pod_template(set_id, "steer-spread", labels=labels, preferred=_cpu_pod_terms())
    names = [f"chain-{i}" for i in range(8)]

    def replicas(honor: bool) -> dict[str, str | None]:
        constraints = [spread_constraint(r, labels) for r in (zone_rule, host_rule)]
        for c in constraints:
            assert c is not None
            if not honor:
                del c["nodeTaintsPolicy"]
        template["spec"]["topologySpreadConstraints"] = constraints
        ns = make_namespace(prefix="hosts")
        for name in names:
            core.create_namespaced_pod(ns, bare_pod(name, template))
        return _placed_or_unschedulable(core, ns, names)

    placed = replicas(honor=True)
    assert None not in placed.values(), placed
    per_node = Counter(placed.values())
    assert Counter(zone_of[n] for n in placed.values()) == {"zone-a": 4, "zone-b": 4}
    usable = [per_node[n] for n, zone in zone_of.items() if zone != "zone-c"]
    assert max(usable) - min(usable) <= host_rule.max_skew, per_node

    held = replicas(honor=False)
    assert Counter(zone_of[n] for n in held.values() if n) == {"zone-a": 1, "zone-b": 1}, held


def test_gpu_jobs_pack_and_leave_whole_nodes_for_whole_node_jobs(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any
) -> None:
    """Four GPU nodes; the free GPUs of the last are 95 % busy from outside. Labels and taints
    are what two scorer cycles plan for them (so `gpu-hot` is on, and that node is not
    reserved). Then, on the real scheduler: 6 one-GPU jobs share one node, 6 CPU pods that
    fit nowhere else go to the hot node, and two 8-GPU jobs bind on the two nodes left whole."""
    set_id = f"gpu-{uuid.uuid4().hex[:6]}"
    names = [f"{set_id}-{i}" for i in range(4)]
    hot_node = names[3]
    states = [
        NodeState(name=n, allocatable={"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"})
        for n in names
    ]
    values = {
        "gpu-util": {n: 95.0 if n == hot_node else 0.0 for n in names},
        "power": dict.fromkeys(names, 900.0),
        "health": dict.fromkeys(names, 1.0),
    }
    memory = ScorerMemory()
    for at in (1000.0, 1030.0):  # gpu-hot: setAfterCycles 2
        plan, memory = plan_cycle(
            POLICY, states, readings_for(POLICY, states, values, at), memory, at, pod_usages={}
        )
    for name in names:
        node_plan = plan.node(name)
        assert node_plan is not None
        make_node(
            name,
            cpu="64",
            memory="512Gi",
            gpus=8,
            labels={SET_KEY: set_id, **node_plan.labels},
            taints=[t.to_k8s() for t in node_plan.taints],
            # The gates the scorer publishes (gpu-hot closed on the hot node), and the pool.
            extra_capacity={k: v for k, v in node_plan.resource_changes.items() if v is not None},
        )
    assert RESERVED not in plan.node(hot_node).labels  # type: ignore[union-attr]
    assert all(plan.node(n).labels[RESERVED] == "true" for n in names[:3])  # type: ignore[union-attr]

    ns = make_namespace(prefix="gpu")
    core = client.CoreV1Api(control_plane.api_client())
    gpu_job = pod_template(
        set_id,
        POLICY.spec.scheduler_profiles.binpack,
        labels={"app": "train"},
        preferred=[t.to_k8s() for t in class_preferences(POLICY, GPU_CLASS)],
        requests={"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
    )
    # The class's gates (avoid gpu-hot), as the webhook makes the pod request them.
    gates = {g.resource: "1" for g in pod_gates(POLICY, None, GPU_CLASS)}
    assert gates
    gpu_job["spec"]["containers"][0]["resources"]["requests"].update(gates)
    jobs = [f"job-{i}" for i in range(6)]
    for name in jobs:
        core.create_namespaced_pod(ns, bare_pod(name, gpu_job))
    placed = wait_bound(control_plane, ns, jobs)
    assert len(set(placed.values())) == 1 and hot_node not in placed.values(), placed
    packed = next(iter(placed.values()))

    cpu_pod = pod_template(
        set_id,
        POLICY.spec.scheduler_profiles.spread,
        labels={"app": "svc"},
        preferred=_cpu_pod_terms(),
        requests={"cpu": "8", "memory": "16Gi"},
    )
    services = [f"svc-{i}" for i in range(6)]
    for name in services:
        core.create_namespaced_pod(ns, bare_pod(name, cpu_pod))
    placed = wait_bound(control_plane, ns, services)
    assert set(placed.values()) == {hot_node}, placed

    whole = pod_template(
        set_id,
        POLICY.spec.scheduler_profiles.binpack,
        labels={"app": "whole"},
        preferred=[t.to_k8s() for t in class_preferences(POLICY, GPU_CLASS)],
        requests={"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
    )
    whole["spec"]["containers"][0]["resources"]["requests"].update(gates)
    for name in ("whole-0", "whole-1"):
        core.create_namespaced_pod(ns, bare_pod(name, whole))
    placed = wait_bound(control_plane, ns, ["whole-0", "whole-1"])
    assert set(placed.values()) == set(names[:3]) - {packed}, placed
