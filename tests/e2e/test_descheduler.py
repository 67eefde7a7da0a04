"""Drift correction through the real descheduler (v0.36, one cycle) on the session control plane,
with pods running on kubemark hollow nodes (real kubelets).

A node turns hot after its pods were placed: a real Prometheus scrapes a synthetic DCGM exporter
(95 % GPU load on it), and the real scorer, two cycles later, taints it `gpu-hot` (NoSchedule).
The DeschedulerPolicy `steer descheduler policy` generates for that steering policy then evicts
the opted-in ReplicaSet's pod there, and the replacement runs on the other node. It leaves alone
a pod of a namespace that is not opted in, a DaemonSet's pod, and a pod whose
PodDisruptionBudget allows no disruption.

Consolidation: an energy policy (the example's Kepler dimensions, a power model by instance
type, drain candidates and `spec.descheduling.consolidation`) over a power-hungry node holding
three opted-in pods and one of a namespace that is not opted in, and two efficient nodes each
running a pod. The same Prometheus has no Kepler series for them, so the watts are the power
model's, as on a cluster with only specs. One real scorer cycle marks the hungry node a drain
candidate (label, reason, PreferNoSchedule taint) and no other; the consolidation profile of
the same policy then evicts nothing while the pods are younger than
`consolidation.minPodAgeSeconds`, then exactly `maxPodsPerNode` opted-in pods, whose
replacements run on the efficient active nodes; the pod that is not opted in stays.

The descheduler runs as a user bound to the ClusterRole of manifests/components/descheduler, so
the component's RBAC is what it has.
"""

from __future__ import annotations

import re
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
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.descheduling import descheduler_policy, drain_candidate_key
from steer.core.policy import Policy, parse_policy
from steer.core.steering import drain_keys, drain_taint_key
from tests.e2e.conftest import user_bound_to
from tests.scorer_support import SMALL_POLICY

OPT_IN = {"kube-steer.github.io/enabled": "true"}
HOT_TAINT = "kube-steer.github.io/gpu-hot"
SET_KEY = "e2e.kube-steer.github.io/desched-set"
HOSTNAME = "kubernetes.io/hostname"
RBAC = ROOT / "manifests" / "components" / "descheduler" / "rbac.yaml"
CLOSED = {"key": "e2e.kube-steer.github.io/closed", "value": "true", "effect": "NoSchedule"}
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
# Kinds of this module's own (no other node of the session has them): watts from the data sheet.
EFFICIENT, LEGACY = "consol-efficient", "consol-legacy"
EXAMPLE = yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text())


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


def consolidating_policy(min_pod_age_seconds: int) -> Policy:
    """The example's energy dimensions (Kepler >= 0.10 queries) alone, a power model of this
    module's two kinds, drain candidates, and consolidation (two pods a node a run). No gate
    and no pool: nothing but consolidation and drain candidates makes the scorer read pods."""
    # These nodes have specs and no Kepler: idle-power resolves none of the nodes its coverage
    # expects, which is reported, and the power model stands in for every node.
    dimensions = [
        d for d in EXAMPLE["spec"]["dimensions"] if d["name"] in ("core-power", "idle-power")
    ]
    document = {
        "apiVersion": EXAMPLE["apiVersion"],
        "kind": "SteeringPolicy",
        "metadata": {"name": "consolidation"},
        "spec": {
            "scoring": {"step": 10, "hysteresis": 0},
            "dimensions": dimensions,
            "energy": {
                "wattsPerCore": "core-power",
                "idleWatts": "idle-power",
                "powerModel": {
                    "nodeLabel": INSTANCE_TYPE,
                    "types": {
                        EFFICIENT: {"idleWatts": 100, "wattsPerCore": 5},
                        LEGACY: {"idleWatts": 200, "wattsPerCore": 10},
                    },
                },
                "consolidation": {"weight": 1},
                "drainCandidates": {"enabled": True, "minSavedWatts": 50},
            },
            "descheduling": {
                "maxPodsPerNode": 2,
                "maxPodsPerNamespace": 3,
                "consolidation": {"enabled": True, "minPodAgeSeconds": min_pod_age_seconds},
            },
        },
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


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    """One Prometheus for the module, scraping a synthetic exporter; each test adds its nodes."""
    cluster = SyntheticCluster(nodes=0)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield cluster, prom


@pytest.fixture
def cluster_nodes(
    control_plane: ControlPlane, scraped: tuple[SyntheticCluster, PrometheusServer]
) -> Iterator[tuple[SyntheticCluster, PrometheusServer, list[HollowNode]]]:
    cluster, prom = scraped
    set_id = uuid.uuid4().hex[:5]
    hot, cool = f"desched-{set_id}-1", f"desched-{set_id}-2"
    for name, util in ((hot, 95), (cool, 20)):
        cluster.add_node(name, gpus=2)
        cluster.set_gpu_util(name, util)
    nodes = [HollowNode(control_plane, name, labels={SET_KEY: set_id}) for name in (hot, cool)]
    try:
        start_all(nodes)
        prom.wait_for(
            f'count(DCGM_FI_DEV_GPU_UTIL{{hostname=~"{hot}|{cool}"}})',
            lambda r: r.samples[0].value == 4,
        )
        yield cluster, prom, nodes
    finally:
        for node in nodes:
            node.delete()
            cluster.remove_node(node.name)


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


def _consolidated(name: str, set_id: str, replicas: int, resident: bool = False) -> dict[str, Any]:
    """A ReplicaSet of pods requesting 100m and 128Mi. Residents: one per efficient node
    (required anti-affinity), tolerating the taint that keeps the others off those nodes."""
    workload = _workload("ReplicaSet", name, set_id, None, replicas=replicas)
    spec = workload["spec"]["template"]["spec"]
    requests = {"cpu": "100m", "memory": "128Mi"}
    spec["containers"][0]["resources"] = {"requests": requests, "limits": requests}
    if resident:
        spec["nodeSelector"][INSTANCE_TYPE] = EFFICIENT
        spec["tolerations"] = [{**CLOSED, "operator": "Equal"}]
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": HOSTNAME}
                ]
            }
        }
    return workload


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
    scraped: tuple[SyntheticCluster, PrometheusServer],
    descheduler_user: Path,
) -> None:
    _cluster, prom = scraped
    set_id = uuid.uuid4().hex[:5]
    # The efficient nodes refuse pods but their residents until the hungry one holds the rest.
    hungry = HollowNode(
        control_plane, f"consol-{set_id}-0", labels={SET_KEY: set_id, INSTANCE_TYPE: LEGACY}
    )
    efficient = [
        HollowNode(
            control_plane,
            f"consol-{set_id}-{i}",
            labels={SET_KEY: set_id, INSTANCE_TYPE: EFFICIENT},
            taints=[CLOSED],
        )
        for i in (1, 2)
    ]
    nodes = [hungry, *efficient]
    api_client = control_plane.api_client()
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    try:
        start_all(nodes)
        opted = make_namespace(labels=OPT_IN, prefix="consol")
        other = make_namespace(prefix="consol-out")
        apps.create_namespaced_replica_set(opted, _consolidated("batch", set_id, 3))
        apps.create_namespaced_replica_set(other, _consolidated("other", set_id, 1))
        apps.create_namespaced_replica_set(other, _consolidated("resident", set_id, 2, True))

        def running(namespace: str, app: str, count: int) -> list[client.V1Pod] | None:
            pods = _pods(core, namespace, app)
            ok = len(pods) == count and all(p.status.phase == "Running" for p in pods)
            return pods if ok else None

        before = wait_until(
            "three pods run on the hungry node", lambda: running(opted, "batch", 3), timeout=45
        )
        spared = [
            *wait_until("the other pod runs", lambda: running(other, "other", 1), timeout=30),
            *wait_until("the residents run", lambda: running(other, "resident", 2), timeout=30),
        ]
        assert {p.spec.node_name for p in [*before, spared[0]]} == {hungry.name}
        assert sorted(p.spec.node_name for p in spared[1:]) == [n.name for n in efficient]
        for node in efficient:
            core.patch_node(node.name, {"spec": {"taints": []}})

        # One real scorer cycle: the power model's watts (no Kepler series for these nodes),
        # the bound pods listed as `steer scorer once` lists them.
        policy = consolidating_policy(min_pod_age_seconds=1)
        scorer_client = make_api_client(str(control_plane.kubeconfig))
        scorer = Scorer(lambda: policy, NodeApi(KubeJson(scorer_client)), prometheus_url=prom.url)
        try:
            result = scorer.run_cycle()
        finally:
            scorer.close()
            scorer_client.close()
        assert all(d.ok for d in result.plan.dimensions), result.plan.dimensions
        marks = drain_keys(policy)
        assert marks is not None
        key, reason_key = marks
        # The key the consolidation profile evicts on is the one the scorer taints with.
        assert drain_candidate_key(policy) == drain_taint_key(policy) == key
        marked = core.read_node(hungry.name)
        assert marked.metadata.labels.get(key) == "true"
        reason = marked.metadata.annotations[reason_key]
        # 4 movable pods of 100m and 128Mi (the residents make the efficient nodes active):
        # 200 W idle + (10 - 5) W x 0.4 cores saved.
        assert re.fullmatch(
            r"its 4 movable pods \(0\.4 cores, 0\.5 GiB requested\) fit on 1 active node "
            rf"\((?:{efficient[0].name}|{efficient[1].name})\) at 5 W per busy core against "
            r"10 W here; emptying it saves about 202 W \(200 W idle\)",
            reason,
        ), reason
        taints = [(t.key, t.value, t.effect) for t in marked.spec.taints or []]
        assert taints == [(key, "true", "PreferNoSchedule")], taints
        for node in efficient:
            seen = core.read_node(node.name)
            assert key not in seen.metadata.labels
            assert reason_key not in (seen.metadata.annotations or {})
            assert key not in {t.key for t in seen.spec.taints or []}

        # Younger than consolidation.minPodAgeSeconds: nothing moves.
        young = consolidating_policy(min_pod_age_seconds=3600)
        run = run_descheduler(control_plane, descheduler_policy(young), kubeconfig=descheduler_user)
        assert run.returncode == 0, run.log[-3000:]
        assert run.evicted == [], run.log[-3000:]
        for pod in before:  # tried on the tainted node, and held back by their age alone
            assert any(
                f'pod="{opted}/{pod.metadata.name}"' in line
                and "pod age is not older than MinPodAge: &Duration{Duration:1h0m0s,}" in line
                for line in run.log.splitlines()
            ), run.log[-3000:]
        time.sleep(max(0.0, 2.5 - (time.time() - _latest_start(before))))

        run = run_descheduler(
            control_plane, descheduler_policy(policy), kubeconfig=descheduler_user
        )
        assert run.returncode == 0, run.log[-3000:]
        assert len(run.evicted) == 2, run.log[-3000:]  # maxPodsPerNode
        assert {ns for ns, _name in run.evicted} == {opted}, run.evicted
        lines = run.log.splitlines()
        for _ns, name in run.evicted:
            assert any(
                f'"Evicted pod" pod="{opted}/{name}"' in line
                and f'node="{hungry.name}" profile="kube-steer-consolidation"' in line
                for line in lines
            ), run.log[-3000:]
        # The third was tried too: the cap, not a shortage of pods, stopped the run.
        assert any(
            "maximum number of evicted pods per node reached" in line
            and f'limit=2 node="{hungry.name}"' in line
            for line in lines
        ), run.log[-3000:]
        evicted = {name for _ns, name in run.evicted}
        assert evicted < {p.metadata.name for p in before}

        after = wait_until(
            "the replacements run",
            lambda: (
                (pods := running(opted, "batch", 3))
                and not evicted & {p.metadata.name for p in pods}
                and pods
            ),
            timeout=30,
        )
        moved = [p for p in after if p.metadata.name not in {b.metadata.name for b in before}]
        assert len(moved) == 2
        assert {p.spec.node_name for p in moved} <= {n.name for n in efficient}
        # The third opted-in pod (the cap) and the pods of the namespace not opted in stay.
        stayed = [p for p in before if p.metadata.name not in evicted]
        for pod in [*stayed, *spared]:
            now = core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
            assert (now.metadata.uid, now.spec.node_name, now.status.phase) == (
                pod.metadata.uid,
                pod.spec.node_name,
                "Running",
            ), pod.metadata.name
    finally:
        for node in nodes:
            node.delete()


def _latest_start(pods: list[client.V1Pod]) -> float:
    return max(p.status.start_time.timestamp() for p in pods)
