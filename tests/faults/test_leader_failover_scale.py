"""Fault: the scorer's leader killed (SIGKILL) or frozen (SIGSTOP) in the middle of a cycle's
writes at 5,000 nodes (issue: when the control plane misbehaves), on the real kube-apiserver
and etcd v1.36.2, two real scorer processes and a real Prometheus. `make faults-scale` runs it
(marker `scale`: about 5 minutes, past `make faults`' budget); the frozen leader at eight nodes is
tests/faults/test_leader_failover.py, in `make faults`.

5,000 fake Node objects (bench/benchkit/nodes.py's `BareNode`, created concurrently through the
API), one pod holding 2 cores of the dept-b pool on every tenth node and one outside the pool
holding 60 cores on every twentieth (their nodes' pools: 64 cores, or 4). Prometheus scrapes one
GPU series a node. Two replicas elect a leader on a Lease (15 s lease, 2 s retry: the scorer's
defaults); each runs as a user of its own, so the audit log tells whose write each is. Every
node's data changes at once, so the leader's next cycle rewrites all 5,000 labels at the
policy's 100 writes a second (eight writer threads); the leader is faulted once a fifth of them
are written. A killed leader is gone; a frozen one is thawed once the standby has published,
its threads stopped anywhere, some between their last look at the Lease and their request: the
fencing case. What must hold, and is printed as figures:

- the standby publishes every node's new label within the bound: the lease, its retry, a
  cycle (interval and compute) and all 5,000 writes at 100 a second (15 + 2 + 3 + 10 + 50 s);
- no write of the old leader lands after the standby took the Lease (the Lease's acquireTime
  against the audit log's times), and the standby writes nothing before;
- no node's cpu pool, from its first publication to the end, is ever below what the pods
  bound there hold (a pool withdrawn counts as 0).

`FAULTS_SCALE_NODES=500` runs the same at 500 nodes (2 minutes), to try a change quickly.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.benchkit.api import Api
from bench.benchkit.node_watch import NodeWatch
from bench.benchkit.nodes import bare_nodes, create_nodes
from bench.benchkit.progress import in_parallel
from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer
from kits.service_processes import running_scorer
from kits.synthetic_exporter import Family, SyntheticCluster, SyntheticExporter
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from steer.core.quantity import parse_quantity
from tests.faults.control_plane_support import GROUP, POOL_CPU, SCORE, grant_group
from tests.faults.prometheus_support import node_writes
from tests.faults.test_leader_failover import LEASE, LEASE_NS, holder

pytestmark = pytest.mark.scale

NODE_COUNT = int(os.environ.get("FAULTS_SCALE_NODES", "5000"))
POOL_EVERY, FOREIGN_EVERY = 10, 20  # a pool pod on every 10th node, a foreign one on every 20th
POOL_POD_CPU, FOREIGN_POD_CPU = 2, 60  # cores (the nodes have 64)
WRITE_QPS = 100
LEASE_S, RETRY_S, INTERVAL_S, CYCLE_S = 15.0, 2.0, 3.0, 10.0  # the failover bound's parts
BOUND_S = LEASE_S + RETRY_S + INTERVAL_S + CYCLE_S + NODE_COUNT / WRITE_QPS
KILL_AT = NODE_COUNT // 5  # nodes carrying their new label when the leader is killed
TENANT_NS, FOREIGN_NS = "scale-dept-b", "scale-other"
POLICY = f"""\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {{name: faults-scale}}
spec:
  scoring: {{step: 10, hysteresis: 3, ttlSeconds: 600, hotPenaltyPerPod: 0,
            intervalSeconds: {INTERVAL_S:.0f}, writeQps: {WRITE_QPS}, writeBurst: 20}}
  dimensions:
    - name: util
      query: avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)
      nodeLabel: hostname
      unit: pct
      direction: lowerIsBetter
      normalization: {{method: fixed, min: 0, max: 100}}
      weight: 1
  tenants:
    - name: dept-b
      namespaceSelector: {{matchLabels: {{tenant: dept-b}}}}
      overcommitPercent: 0
  overcommit: {{enforcement: scheduler}}
"""


class GpuUtilOnly:
    """The cluster's GPU utilisation series alone: 5,000 series a scrape instead of 130,000,
    so Prometheus and the exporter leave the two cores to the apiserver and the scorers."""

    def __init__(self, cluster: SyntheticCluster) -> None:
        self.cluster = cluster

    def families(self, now: float) -> list[Family]:
        return [f for f in self.cluster.families(now) if f.name == "DCGM_FI_DEV_GPU_UTIL"]


class PoolFloor(NodeWatch):
    """Every node as a watch sees it: its score label and since when, and the lowest cpu pool it
    published once it had one (a pool withdrawn counts as 0)."""

    def __init__(self, api: Api) -> None:
        super().__init__(api, parse_policy(POLICY))
        self.score: dict[str, tuple[str, float]] = {}  # node: (score label, carried since)
        self.floor: dict[str, int] = {}
        self._floor_lock = threading.Lock()

    def _see(self, obj: Mapping[str, Any], now: float, initial: bool = False) -> None:
        super()._see(obj, now, initial)
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        label = str((meta.get("labels") or {}).get(SCORE, ""))
        pool = ((obj.get("status") or {}).get("allocatable") or {}).get(POOL_CPU)
        with self._floor_lock:
            if self.score.get(name, ("", 0.0))[0] != label:
                self.score[name] = (label, now)
            if pool is not None or name in self.floor:
                found = int(parse_quantity(pool or "0"))
                self.floor[name] = min(self.floor.get(name, found), found)

    def carrying(self, score: str) -> tuple[int, float]:
        """How many nodes carry `score`, and since when the last of them does."""
        with self._floor_lock:
            times = [t for label, t in self.score.values() if label == score]
        return len(times), max(times, default=0.0)


def bound_pod(name: str, node: str, cores: int, pool: bool) -> dict[str, Any]:
    """A pod bound to `node` (no scheduler here) holding `cores`, in the pool when `pool`."""
    amounts: dict[str, str] = {"cpu": str(cores), "memory": "1Gi"}
    if pool:
        amounts[POOL_CPU] = str(cores * 1000)  # the pool counts limits in millicores
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": amounts, "limits": amounts},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def bind_pods(api: Api, names: list[str]) -> dict[str, int]:
    """The pool and foreign pods on their nodes; per node, the pool millicores they hold."""
    made: list[tuple[str, dict[str, Any]]] = []
    held: dict[str, int] = {}
    for i, node in enumerate(names):
        if i % POOL_EVERY == 0:
            made.append((TENANT_NS, bound_pod(f"pool-{i}", node, POOL_POD_CPU, pool=True)))
            held[node] = POOL_POD_CPU * 1000
        if i % FOREIGN_EVERY == 0:
            made.append((FOREIGN_NS, bound_pod(f"other-{i}", node, FOREIGN_POD_CPU, pool=False)))
    in_parallel(
        lambda item: api.send("POST", f"/api/v1/namespaces/{item[0]}/pods", orjson.dumps(item[1])),
        made,
    )
    return held


def wall_time(stamp: str) -> float:
    """Unix seconds of an RFC 3339 time the apiserver wrote (an audit stage, a Lease's)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def lease_acquired(admin: KubeJson) -> float:
    """When the Lease's holder acquired it, as the apiserver stored it."""
    lease = admin.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}"
    )
    return wall_time(str(lease["spec"]["acquireTime"]))


@dataclass
class Fleet:
    """The control plane with its 5,000 nodes and their pods, Prometheus scraping their GPUs,
    and a watch of every node: what the failovers of this module share."""

    plane: ControlPlane
    admin: KubeJson
    cluster: SyntheticCluster
    names: list[str]
    held: dict[str, int]  # per node, the pool millicores its pods hold
    prometheus_url: str
    watch: PoolFloor
    created_s: float


@dataclass(frozen=True)
class Failover:
    """What one failover measured."""

    steady_s: float  # from the leader's start until every node carried its score and pool
    written_at_fault: int  # new labels written when the leader was faulted
    took_over_s: float  # from the fault until the standby held the Lease
    published_s: float  # from the fault until every node carried its new label
    late: tuple[str, ...]  # writes of the faulted leader that landed after it lost the Lease
    after_fault: int  # writes of the faulted leader that landed after the fault
    early: tuple[str, ...]  # writes of the standby that landed before it led
    standby_writes: int


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(
            ControlPlane.start(
                tmp_path_factory.mktemp("leader-failover-scale"),
                scheduler=False,
                audit_groups=[GROUP],
            )
        )
        api = Api(plane)
        stack.callback(api.close)
        nodes = bare_nodes(NODE_COUNT, gpus_per_node=0)
        create_nodes(api, nodes)
        names = [n.name for n in nodes]
        created_s = time.monotonic() - started
        plane.ensure_namespace(LEASE_NS)
        plane.ensure_namespace(TENANT_NS, {"tenant": "dept-b"})
        plane.ensure_namespace(FOREIGN_NS)
        held = bind_pods(api, names)
        admin = KubeJson(make_api_client(str(plane.kubeconfig)))
        grant_group(admin)
        cluster = SyntheticCluster(nodes=0, gpus_per_node=1)
        for name in names:
            cluster.add_node(name, gpus=1)
            cluster.set_gpu_util(name, 10)
        exporter = stack.enter_context(SyntheticExporter(GpuUtilOnly(cluster)))
        prom = stack.enter_context(PrometheusServer([exporter.target], scrape_interval_s=2.0))
        prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL) > 0")
        watch = PoolFloor(api)
        watch.start()
        stack.callback(watch.stop)
        yield Fleet(plane, admin, cluster, names, held, prom.url, watch, created_s)


def fail_over(
    fleet: Fleet, workdir: Path, pair: tuple[str, str], fault: signal.Signals
) -> Failover:
    """Replica `pair[0]` leads, `pair[1]` stands by; every node's GPU utilisation moves, and the
    leader gets `fault` once a fifth of the new labels are written. SIGSTOP: thawed (SIGCONT)
    once the standby has published every node, and watched for three cycles more."""
    plane, watch = fleet.plane, fleet.watch
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(POLICY)
    users = {name: f"fault-scale-scorer-{name}" for name in pair}
    was, score, util = (
        ("20", "90", 10) if watch.carrying("20")[0] == NODE_COUNT else ("90", "20", 80)
    )
    with contextlib.ExitStack() as stack:

        def replica(name: str) -> Any:
            return stack.enter_context(
                running_scorer(
                    plane,
                    policy_file,
                    fleet.prometheus_url,
                    workdir,
                    name=f"scale-scorer-{name}",
                    kubeconfig=plane.user_kubeconfig(users[name], groups=[GROUP]),
                    extra_args=["--lease-namespace", LEASE_NS, "--identity", f"replica-{name}"],
                )
            )

        started = time.monotonic()
        leader = replica(pair[0])
        leader.wait_ready(timeout=120)
        wait_until(
            f"replica-{pair[0]} leads",
            lambda: holder(fleet.admin) == f"replica-{pair[0]}" or None,
            timeout=LEASE_S + 15,
        )
        standby = replica(pair[1])
        wait_until(
            "every node pooled and scored",
            lambda: (
                (
                    watch.counts() == (NODE_COUNT, NODE_COUNT)
                    and watch.carrying(was)[0] == NODE_COUNT
                )
                or None
            ),
            timeout=300,
            interval=1,
        )
        steady_s = time.monotonic() - started
        standby.wait_ready(timeout=120)
        time.sleep(2 * INTERVAL_S)  # both replicas a cycle or two on from there
        since = plane.audit_offset()
        for name in fleet.names:
            fleet.cluster.set_gpu_util(name, util)
        wait_until(
            f"the leader's first {KILL_AT} writes of the new labels",
            lambda: watch.carrying(score)[0] >= KILL_AT or None,
            timeout=120,
            interval=0.05,
        )
        os.kill(leader.process.pid, fault)
        faulted_at, faulted_wall = time.monotonic(), time.time()
        written_at_fault = watch.carrying(score)[0]
        try:
            wait_until(
                f"replica-{pair[1]} leads",
                lambda: holder(fleet.admin) == f"replica-{pair[1]}" or None,
                timeout=LEASE_S + 30,
                interval=0.1,
            )
            took_over_s, took_over_wall = time.monotonic() - faulted_at, lease_acquired(fleet.admin)
            wait_until(
                "every node's new label",
                lambda: watch.carrying(score)[0] == NODE_COUNT or None,
                timeout=BOUND_S + 60,
                interval=0.2,
            )
            published_s = watch.carrying(score)[1] - faulted_at
        finally:
            if fault == signal.SIGSTOP:
                os.kill(leader.process.pid, signal.SIGCONT)
        time.sleep(3 * INTERVAL_S)  # a thawed leader's threads run on; the pools a cycle on
        assert standby.running
        assert fault != signal.SIGSTOP or leader.running
        old_leader_writes = node_writes(plane, since, users[pair[0]])
        standby_writes = node_writes(plane, since, users[pair[1]])

    landed = [(wall_time(w.at), w.node) for w in old_leader_writes]
    return Failover(
        steady_s=steady_s,
        written_at_fault=written_at_fault,
        took_over_s=took_over_s,
        published_s=published_s,
        late=tuple(name for at, name in landed if at >= took_over_wall),
        after_fault=sum(1 for at, _ in landed if at > faulted_wall),
        early=tuple(w.node for w in standby_writes if wall_time(w.at) < took_over_wall),
        standby_writes=len(standby_writes),
    )


def held_below(fleet: Fleet) -> dict[str, tuple[int, int]]:
    """Nodes whose cpu pool was ever below what their pods hold: (lowest pool, held)."""
    floor = fleet.watch.floor
    return {n: (floor.get(n, 0), h) for n, h in fleet.held.items() if floor.get(n, 0) < h}


def figures(fleet: Fleet, what: str, run: Failover) -> str:
    below = held_below(fleet)
    return (
        f"{what} at {NODE_COUNT:,} nodes with {run.written_at_fault:,} of {NODE_COUNT:,} new "
        f"labels written (nodes created in {fleet.created_s:.1f} s, every node scored and "
        f"pooled {run.steady_s:.1f} s after the leader started): standby led after "
        f"{run.took_over_s:.1f} s, every node's new label published {run.published_s:.1f} s "
        f"after the fault (bound {BOUND_S:.0f} s); writes of the old leader after the fault "
        f"{run.after_fault}, after its Lease was taken {len(run.late)}; writes by the standby "
        f"before it led {len(run.early)}, in all {run.standby_writes}; pools below what their "
        f"pods hold {len(below)} of {len(fleet.held)}"
    )


def check(fleet: Fleet, run: Failover) -> None:
    assert KILL_AT <= run.written_at_fault < NODE_COUNT, run.written_at_fault  # mid-cycle
    assert run.published_s <= BOUND_S, run.published_s
    assert not run.late, f"the old leader's writes landed after it lost the Lease: {run.late[:10]}"
    assert not run.early, f"the standby wrote before it led: {run.early[:10]}"
    below = held_below(fleet)
    assert not below, f"pools below what their pods hold: {dict(list(below.items())[:10])}"


def test_a_leader_killed_mid_cycle_at_5000_nodes_is_replaced_within_the_bound(
    fleet: Fleet, tmp_path: Path, fault_summary: Callable[[str], None]
) -> None:
    run = fail_over(fleet, tmp_path, ("a", "b"), signal.SIGKILL)
    fault_summary(figures(fleet, "leader SIGKILLed mid-cycle", run))
    check(fleet, run)


def test_a_leader_frozen_mid_cycle_at_5000_nodes_writes_nothing_once_thawed(
    fleet: Fleet, tmp_path: Path, fault_summary: Callable[[str], None]
) -> None:
    """The fencing case: the frozen leader's eight writer threads stopped anywhere, some
    between their last check of the Lease and their request; thawed, none may land."""
    run = fail_over(fleet, tmp_path, ("c", "d"), signal.SIGSTOP)
    fault_summary(figures(fleet, "leader SIGSTOPped mid-cycle, thawed after", run))
    check(fleet, run)
