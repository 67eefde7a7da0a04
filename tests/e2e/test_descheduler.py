"""Drift correction through the real descheduler (v0.36, one cycle) on the session control plane,
with pods running on kubemark hollow nodes (real kubelets).

A node turns hot after its pods were placed: a real Prometheus scrapes a synthetic DCGM exporter
(95 % GPU load on it), and the real scorer, two cycles later, taints it `gpu-hot` (NoSchedule).
The DeschedulerPolicy `steer descheduler policy` generates for that steering policy then evicts
the opted-in ReplicaSet's pod there, and the replacement runs on the other node. It leaves alone
a pod of a namespace that is not opted in, a DaemonSet's pod, and a pod whose
PodDisruptionBudget allows no disruption.

Consolidation: from a node marked drain candidate (its PreferNoSchedule taint), the same policy's
consolidation profile evicts the pods, none while they are younger than
`consolidation.minPodAgeSeconds`, then at most `maxPodsPerNode` a cycle, and their replacements
run on the other nodes.

The descheduler runs as a user bound to the ClusterRole of manifests/components/descheduler, so
the component's RBAC is what it has.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.control_plane import ROOT, ControlPlane
from kits.descheduler import run_descheduler
from kits.hollow_nodes import HollowNode, start_all, wait_pods_running
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from scorer.service import Scorer
from scorer.writer import NodeApi
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.descheduling import descheduler_policy, drain_candidate_key
from steer.core.policy import Policy, parse_policy
from tests.e2e.conftest import user_bound_to
from tests.scorer_support import SMALL_POLICY

OPT_IN = {"kube-steer.github.io/enabled": "true"}
HOT_TAINT = "kube-steer.github.io/gpu-hot"
SET_KEY = "e2e.kube-steer.github.io/desched-set"
HOSTNAME = "kubernetes.io/hostname"
RBAC = ROOT / "manifests" / "components" / "descheduler" / "rbac.yaml"
CLOSED = {"key": "e2e.kube-steer.github.io/closed", "value": "true", "effect": "NoSchedule"}


def steering_policy(**descheduling: Any) -> Policy:
    """The scorer tests' small policy (`gpu-hot`: NoSchedule above 90 % GPU load, two cycles),
    with drift correction for pods of any age."""
    document = yaml.safe_load(SMALL_POLICY)
    document["spec"]["descheduling"] = {
        "minPodAgeSeconds": 0,
        "maxPodsPerNode": 3,
        "maxPodsPerNamespace": 3,
        **descheduling,
    }
    return parse_policy(yaml.safe_dump(document))


@pytest.fixture
def descheduler_user(control_plane: ControlPlane, admin: KubeJson) -> Iterator[Path]:
    """A kubeconfig for a user bound to the component's ClusterRole, and nothing else."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")
    with user_bound_to(
        control_plane, admin, role, f"descheduler-{uuid.uuid4().hex[:6]}"
    ) as kubeconfig:
        yield kubeconfig


@pytest.fixture
def cluster_nodes(
    control_plane: ControlPlane,
) -> Iterator[tuple[SyntheticCluster, PrometheusServer, list[HollowNode]]]:
    set_id = uuid.uuid4().hex[:5]
    cluster = SyntheticCluster(nodes=2, gpus_per_node=2, node_prefix=f"desched-{set_id}-")
    hot, cool = f"desched-{set_id}-1", f"desched-{set_id}-2"
    cluster.set_gpu_util(hot, 95)
    cluster.set_gpu_util(cool, 20)
    nodes = [HollowNode(control_plane, name, labels={SET_KEY: set_id}) for name in (hot, cool)]
    try:
        with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
            start_all(nodes)
            yield cluster, prom, nodes
    finally:
        for node in nodes:
            node.delete()


def _pod_spec(set_id: str, prefer: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {SET_KEY: set_id},
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
    }
    if prefer:
        term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [prefer]}]}
        spec["affinity"] = {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": term}
                ]
            }
        }
    return spec


def _workload(
    kind: str, name: str, set_id: str, prefer: str | None, replicas: int = 1
) -> dict[str, Any]:
    labels = {"app": name}
    spec: dict[str, Any] = {
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": _pod_spec(set_id, prefer)},
    }
    if kind == "ReplicaSet":
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _pods(core: client.CoreV1Api, namespace: str, app: str) -> list[client.V1Pod]:
    listed = core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return [p for p in listed if p.metadata.deletion_timestamp is None]


def _one_running(core: client.CoreV1Api, namespace: str, app: str) -> client.V1Pod | None:
    pods = _pods(core, namespace, app)
    if len(pods) == 1 and pods[0].status.phase == "Running":
        return pods[0]
    return None


def test_the_descheduler_evicts_from_a_node_the_scorer_tainted_and_spares_what_it_must(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    cluster_nodes: tuple[SyntheticCluster, PrometheusServer, list[HollowNode]],
    descheduler_user: Path,
) -> None:
    _cluster, prom, (hot, cool) = cluster_nodes
    set_id = hot.labels[SET_KEY]
    api_client = control_plane.api_client()
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    opted = make_namespace(labels=OPT_IN, prefix="desched-in")
    other = make_namespace(prefix="desched-out")

    apps.create_namespaced_replica_set(opted, _workload("ReplicaSet", "web", set_id, hot.name))
    apps.create_namespaced_replica_set(opted, _workload("ReplicaSet", "guarded", set_id, hot.name))
    apps.create_namespaced_daemon_set(opted, _workload("DaemonSet", "agent", set_id, hot.name))
    apps.create_namespaced_replica_set(other, _workload("ReplicaSet", "other", set_id, hot.name))
    client.PolicyV1Api(api_client).create_namespaced_pod_disruption_budget(
        opted,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    def placed() -> dict[tuple[str, str], client.V1Pod] | None:
        found = {
            (opted, "web"): _one_running(core, opted, "web"),
            (opted, "guarded"): _one_running(core, opted, "guarded"),
            (other, "other"): _one_running(core, other, "other"),
        }
        agents = [p for p in _pods(core, opted, "agent") if p.status.phase == "Running"]
        if None in found.values() or len(agents) != 2:
            return None
        found[(opted, "agent")] = next(p for p in agents if p.spec.node_name == hot.name)
        return {k: v for k, v in found.items() if v is not None}

    before = wait_until("every pod runs", placed, timeout=45)
    assert {k: p.spec.node_name for k, p in before.items()} == dict.fromkeys(before, hot.name)
    wait_until(
        "the PDB allows no disruption",
        lambda: (
            (
                pdb := client.PolicyV1Api(api_client).read_namespaced_pod_disruption_budget(
                    "guarded", opted
                )
            ).status
            and pdb.status.observed_generation
            and pdb.status.current_healthy == 1
            and pdb.status.disruptions_allowed == 0
        ),
        timeout=30,
    )

    # The node turns hot: the real scorer, on the real Prometheus data, taints it.
    policy = steering_policy()
    scorer_client = make_api_client(str(control_plane.kubeconfig))
    try:
        scorer = Scorer(lambda: policy, NodeApi(KubeJson(scorer_client)), prometheus_url=prom.url)
        for _ in range(2):  # setAfterCycles: 2
            scorer.run_cycle()
    finally:
        scorer_client.close()
    taints = {t.key: t.effect for t in core.read_node(hot.name).spec.taints or []}
    assert taints.get(HOT_TAINT) == "NoSchedule", taints
    assert HOT_TAINT not in {t.key for t in core.read_node(cool.name).spec.taints or []}

    started = time.monotonic()
    run = run_descheduler(control_plane, descheduler_policy(policy), kubeconfig=descheduler_user)
    assert run.returncode == 0, run.log[-3000:]
    assert run.evicted == [(opted, before[(opted, "web")].metadata.name)], run.log[-3000:]
    # The guarded pod was tried: the Eviction API refused it for its PodDisruptionBudget.
    guarded = before[(opted, "guarded")].metadata.name
    assert any(
        guarded in line and "would violate the pod's disruption budget" in line
        for line in run.log.splitlines()
    ), run.log[-3000:]

    # The replacement runs on the node the taint allows.
    replacement = wait_until(
        "the ReplicaSet's replacement runs",
        lambda: (
            (pod := _one_running(core, opted, "web"))
            and pod.metadata.uid != before[(opted, "web")].metadata.uid
            and pod
        ),
        timeout=30,
    )
    assert replacement.spec.node_name == cool.name
    wait_pods_running(control_plane, opted, [replacement.metadata.name])
    # Spared: the PDB's pod (its eviction was refused), the DaemonSet's, the one not opted in.
    for (namespace, app), pod in before.items():
        if app == "web":
            continue
        now = core.read_namespaced_pod(pod.metadata.name, namespace)
        assert (now.metadata.uid, now.spec.node_name, now.status.phase) == (
            pod.metadata.uid,
            hot.name,
            "Running",
        ), (namespace, app)
    assert time.monotonic() - started < 60


def test_consolidation_empties_a_drain_candidate_within_the_per_node_cap(
    control_plane: ControlPlane,
    make_namespace: Callable[..., str],
    descheduler_user: Path,
) -> None:
    set_id = uuid.uuid4().hex[:5]
    # The other nodes refuse pods until the candidate holds them all.
    candidate = HollowNode(control_plane, f"consol-{set_id}-0", labels={SET_KEY: set_id})
    others = [
        HollowNode(control_plane, f"consol-{set_id}-{i}", labels={SET_KEY: set_id}, taints=[CLOSED])
        for i in (1, 2)
    ]
    nodes = [candidate, *others]
    api_client = control_plane.api_client()
    core = client.CoreV1Api(api_client)
    try:
        start_all(nodes)
        opted = make_namespace(labels=OPT_IN, prefix="consol")
        client.AppsV1Api(api_client).create_namespaced_replica_set(
            opted, _workload("ReplicaSet", "batch", set_id, None, replicas=3)
        )

        def running() -> list[client.V1Pod] | None:
            pods = _pods(core, opted, "batch")
            ok = len(pods) == 3 and all(p.status.phase == "Running" for p in pods)
            return pods if ok else None

        before = wait_until("three pods run on the candidate", running, timeout=45)
        assert {p.spec.node_name for p in before} == {candidate.name}
        for node in others:
            core.patch_node(node.name, {"spec": {"taints": []}})
        # The scorer marks a node it would empty with a label and a PreferNoSchedule taint of
        # the same key; here the test marks it so.
        policy = steering_policy(
            maxPodsPerNode=2, consolidation={"enabled": True, "minPodAgeSeconds": 1}
        )
        key = drain_candidate_key(policy)
        core.patch_node(
            candidate.name,
            {
                "metadata": {"labels": {key: "true"}},
                "spec": {"taints": [{"key": key, "value": "true", "effect": "PreferNoSchedule"}]},
            },
        )
        # Younger than consolidation.minPodAgeSeconds: nothing moves.
        young = steering_policy(
            maxPodsPerNode=2, consolidation={"enabled": True, "minPodAgeSeconds": 3600}
        )
        run = run_descheduler(control_plane, descheduler_policy(young), kubeconfig=descheduler_user)
        assert run.returncode == 0, run.log[-3000:]
        assert run.evicted == [], run.log[-3000:]
        time.sleep(max(0.0, 2.5 - (time.time() - _latest_start(before))))

        run = run_descheduler(
            control_plane, descheduler_policy(policy), kubeconfig=descheduler_user
        )
        assert run.returncode == 0, run.log[-3000:]
        assert len(run.evicted) == 2, run.log[-3000:]  # maxPodsPerNode
        evicted = {name for _ns, name in run.evicted}
        assert evicted < {p.metadata.name for p in before}

        after = wait_until(
            "the replacements run",
            lambda: (pods := running()) and not evicted & {p.metadata.name for p in pods} and pods,
            timeout=30,
        )
        moved = [p for p in after if p.metadata.name not in {b.metadata.name for b in before}]
        assert len(moved) == 2
        assert {p.spec.node_name for p in moved} <= {n.name for n in others}
    finally:
        for node in nodes:
            node.delete()


def _latest_start(pods: list[client.V1Pod]) -> float:
    return max(p.status.start_time.timestamp() for p in pods)
