"""The budget pool and gates (steer/core/budget.py, gates.py) end to end: `steer scorer run`
publishing them on real Nodes of kube-apiserver v1.36.2, and the real kube-scheduler enforcing
them.

The scorer runs as operators run it, under the manifest's ClusterRole (bound to a client
certificate user), so the test also proves that RBAC lets it list and watch every pod and patch
`nodes/status`. It needs no Prometheus (every query fails; no label is written). Tenant pods
are built by hand with the requests the mutating webhook adds (`TenantBudget`): their limits
from the pool, and the budget gate below the highest budget.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import running_scorer
from kits.waiting import wait_until
from scorer.jobs.pending import EVENT_COMPONENT, EVENT_REASON
from steer.adapters.kubejson import KubeJson, node_path, pod_path
from steer.core.budget import FLOOR_SETTLE_S, tenant_budget
from steer.core.policy import Policy, Tenant, parse_policy
from steer.core.steering import trace_annotation_key
from tests.e2e.waiting import NOT_YET, bound_node, metric, unschedulable_message
from tests.scorer_support import SMALL_POLICY

SCORER_MANIFEST = ROOT / "manifests" / "scorer" / "scorer.yaml"
N1, N2 = "budget-e2e-1", "budget-e2e-2"
SET_KEY = "e2e.kube-steer.github.io/budget-set"
PREFIX = "kube-steer.github.io/"
CPU = f"{PREFIX}pool-cpu"
MEM = f"{PREFIX}pool-memory"
GATE0 = f"{PREFIX}budget-0pct"
HOT = f"{PREFIX}avoid-gpu-hot"
NO_PROMETHEUS = "http://127.0.0.1:9"

# A 5 s cycle: the BlockedBySteering Event is written after a cycle, not 30 s later.
POLICY_TEXT = (
    SMALL_POLICY.replace("intervalSeconds: 30", "intervalSeconds: 5")
    + """\
    - name: dept-a
      namespaceSelector: {matchLabels: {tenant: dept-a}}
      overcommitPercent: 5
  overcommit: {enforcement: scheduler}
"""
)
POLICY: Policy = parse_policy(POLICY_TEXT)
DEPT_A = next(t for t in POLICY.spec.tenants if t.name == "dept-a")
DEPT_B = next(t for t in POLICY.spec.tenants if t.name == "dept-b")


def pod_body(
    name: str,
    node: str,
    requests_: Mapping[str, str],
    limits: Mapping[str, str],
    *,
    tenant: Tenant | None = None,
) -> dict[str, Any]:
    """A pod pinned to `node` (required affinity: the scheduler still decides whether it fits).
    A tenant pod also requests its limits from the pool and its gate (with equal limits), as the
    webhook adds them; any other pod is one the webhook does not steer (no namespace here opts
    in), so it requests neither."""
    resources: dict[str, Any] = {"requests": dict(requests_), "limits": dict(limits)}
    budget = tenant_budget(POLICY, tenant) if tenant is not None else None
    if budget is not None:
        owned = budget.container_requests({"resources": resources})
        if budget.gate is not None:
            owned[budget.gate.resource] = 1
        for key, units in owned.items():  # extended resources: limit = request
            resources["requests"][key] = resources["limits"][key] = str(units)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [node],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "terminationGracePeriodSeconds": 0,
        },
    }


def pools(admin: KubeJson, node: str) -> dict[str, dict[str, str]]:
    status = admin.request("GET", node_path(node))["status"]
    return {
        part: {k: v for k, v in status[part].items() if k.startswith(PREFIX)}
        for part in ("capacity", "allocatable")
    }


def both(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {"capacity": dict(values), "allocatable": dict(values)}


def create_pod(admin: KubeJson, namespace: str, body: Mapping[str, Any]) -> None:
    admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)


def blocked_event(admin: KubeJson, namespace: str, name: str) -> dict[str, Any] | None:
    events = admin.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/events",
        query={"fieldSelector": f"involvedObject.name={name},reason={EVENT_REASON}"},
    )["items"]
    return events[-1] if events else None


def test_scheduler_enforces_the_pool_and_gates_the_scorer_publishes(
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    # 8 cores / 32 GiB: room for limits at 100 % = 8000 m and 32768 MiB, at 105 % 8400 m and
    # 34406 MiB. 20 cores: 20000 m, stored by the apiserver in canonical form as "20k" (the
    # scorer must see that as equal, not rewrite it every cycle).
    make_node(
        N1,
        cpu="8",
        memory="32Gi",
        labels={SET_KEY: "1"},
        extra_capacity={"example.com/dongle": "4"},
    )
    make_node(N2, cpu="20", memory="32Gi", labels={SET_KEY: "1"})
    foreign_ns = make_namespace(prefix="foreign")
    tenant_ns = make_namespace({"tenant": "dept-a"}, prefix="dept-a")
    zero_ns = make_namespace({"tenant": "dept-b"}, prefix="dept-b")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    # No pod anywhere: floor 0 % (open to every tenant), every gate open (one unit per pod).
    empty_n1 = {CPU: "8k", MEM: "32768", GATE0: "110", HOT: "110"}

    with running_scorer(
        control_plane,
        policy_file,
        NO_PROMETHEUS,
        tmp_path,
        name="scorer-budget",
        # argparse keeps the last --kubeconfig: the restricted user's
        extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
    ) as scorer:
        scorer.wait_ready()
        wait_until(
            "pool and gates on N1",
            lambda: pools(admin, N1) == both(empty_n1),
            timeout=30,
            ignoring=NOT_YET,
        )
        wait_until(
            "pool and gates on N2",
            lambda: pools(admin, N2) == both({**empty_n1, CPU: "20k"}),
            timeout=30,
            ignoring=NOT_YET,
        )
        status = admin.request("GET", node_path(N1))["status"]
        assert status["allocatable"]["example.com/dongle"] == "4"  # foreign resources stay
        assert status["allocatable"]["cpu"] == "8"
        annotations = admin.request("GET", node_path(N1))["metadata"]["annotations"]
        assert f'"{CPU}"' in annotations["kube-steer.github.io/managed"]

        # Idle: a refresh writes nothing (the "20k" of N2 counts as equal to 20000) ...
        idle_writes = metric(scorer, "steer_scorer_write_requests_total")
        time.sleep(1.5)
        assert metric(scorer, "steer_scorer_write_requests_total") == idle_writes

        # A foreign burstable pod on N1 (limits 6 cores, 512 MiB) shrinks N1's pool.
        create_pod(
            admin,
            foreign_ns,
            pod_body(
                "burstable",
                N1,
                {"cpu": "500m", "memory": "256Mi"},
                {"cpu": "6", "memory": "512Mi"},
            ),
        )
        wait_until(
            "burstable pod bound",
            lambda: bound_node(admin, foreign_ns, "burstable"),
            timeout=30,
            interval=0.01,
            ignoring=NOT_YET,
        )
        bound_at = time.monotonic()
        wait_until(
            "N1 pool shrunk",
            lambda: pools(admin, N1)["allocatable"] == {**empty_n1, CPU: "2k", MEM: "32256"},
            timeout=10,
            interval=0.02,
            ignoring=NOT_YET,
        )
        republish_s = time.monotonic() - bound_at
        print(f"N1 pool republished {republish_s:.2f}s after the foreign pod was bound")
        assert republish_s < 3.0, republish_s  # not one 30 s cycle later
        assert pools(admin, N2)["allocatable"][CPU] == "20k"

        # /explain follows once the refresh that wrote the pool has recorded its plan (after
        # its writes, so it can trail the node by those).
        def cpu_pool() -> dict[str, Any] | None:
            detail = scorer.get(f"/explain/node/{N1}")["budgetPools"]
            cpu = next(p for p in detail["pools"] if p["resource"] == CPU)
            return cpu if cpu["outsidePods"] else None

        cpu = wait_until("the pool's detail in /explain", cpu_pool, timeout=5, interval=0.02)
        assert (cpu["room"], cpu["outsideLimits"], cpu["outsidePods"], cpu["published"]) == (
            8000,
            6000,
            1,
            "2000",
        )

        # dept-a pods on N1. Their requests fit easily, but limits of 2520 m would take the
        # node past what the pool has: that pod stays Pending; 1575 m binds.
        create_pod(
            admin,
            tenant_ns,
            pod_body(
                "big-burst",
                N1,
                {"cpu": "2400m", "memory": "1Gi"},
                {"cpu": "2520m", "memory": "1Gi"},
                tenant=DEPT_A,
            ),
        )
        create_pod(
            admin,
            tenant_ns,
            pod_body(
                "small-burst",
                N1,
                {"cpu": "1500m", "memory": "1Gi"},
                {"cpu": "1575m", "memory": "1Gi"},
                tenant=DEPT_A,
            ),
        )
        pod = admin.request("GET", pod_path(tenant_ns, "big-burst"))
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        assert requests[CPU] == "2520" and GATE0 not in requests  # the highest budget: no gate
        assert (
            wait_until(
                "small pod bound",
                lambda: bound_node(admin, tenant_ns, "small-burst"),
                timeout=30,
                ignoring=NOT_YET,
            )
            == N1
        )
        message = wait_until(
            "big pod unschedulable",
            lambda: unschedulable_message(admin, tenant_ns, "big-burst"),
            timeout=30,
            ignoring=NOT_YET,
        )
        assert f"Insufficient {CPU}" in message, message
        print(f"big-burst: {message}")
        # A 5 % pod bursts on N1 and no dept-b pod is there: the floor rises. The gate of 0 %
        # closes at once; the room of 105 % follows FLOOR_SETTLE_S later, at a later write.
        wait_until(
            "N1 gate 0 % closed",
            lambda: pools(admin, N1)["allocatable"][GATE0] == "0",
            timeout=10,
            ignoring=NOT_YET,
        )
        assert pools(admin, N1)["allocatable"][CPU] == "2k"

        # A dept-b (budget 0) pod: N1's gate is closed, N2's open.
        zero_n2 = pod_body(
            "zero-n2",
            N2,
            {"cpu": "100m", "memory": "64Mi"},
            {"cpu": "100m", "memory": "64Mi"},
            tenant=DEPT_B,
        )
        zero = pod_body(
            "zero",
            N1,
            {"cpu": "100m", "memory": "64Mi"},
            {"cpu": "100m", "memory": "64Mi"},
            tenant=DEPT_B,
        )
        # As the webhook stores it: its trace says it was steered (scorer/jobs/pending.py watches
        # only those).
        zero["metadata"]["annotations"] = {
            trace_annotation_key(POLICY): json.dumps(
                {"policy": POLICY.version, "rules": ["gate:budget:0"]}
            )
        }
        create_pod(admin, zero_ns, zero)
        create_pod(admin, zero_ns, zero_n2)
        assert (
            wait_until(
                "dept-b on N2",
                lambda: bound_node(admin, zero_ns, "zero-n2"),
                timeout=30,
                ignoring=NOT_YET,
            )
            == N2
        )
        message = wait_until(
            "dept-b unschedulable on N1",
            lambda: unschedulable_message(admin, zero_ns, "zero"),
            timeout=30,
            ignoring=NOT_YET,
        )
        assert f"Insufficient {GATE0}" in message, message
        # The scorer says which of its rules keeps the pod Pending, with the data.
        event = wait_until(
            "a BlockedBySteering Event on the dept-b pod",
            lambda: blocked_event(admin, zero_ns, "zero"),
            timeout=45,
            ignoring=NOT_YET,
        )
        assert event["type"] == "Warning" and event["source"]["component"] == EVENT_COMPONENT
        assert "kube-steer rules budget:0 keep the pod off 1 of" in event["message"], event
        assert f"{N1}: budget:0 ({GATE0} is closed" in event["message"], event
        print(f"zero: {event['message']}")

        # The foreign pod goes; the rise has settled (the next write is the wake-up on that
        # deletion): 8400 m of room, and the waiting 2520 m pod binds.
        time.sleep(FLOOR_SETTLE_S)
        control_plane.delete_pods(foreign_ns, None)
        wait_until(
            "N1 pool at 105 %",
            lambda: pools(admin, N1)["allocatable"][CPU] == "8400",
            timeout=15,
            ignoring=NOT_YET,
        )
        assert (
            wait_until(
                "big pod bound",
                lambda: bound_node(admin, tenant_ns, "big-burst"),
                timeout=60,
                ignoring=NOT_YET,
            )
            == N1
        )
        assert bound_node(admin, zero_ns, "zero") is None
        assert pools(admin, N1)["allocatable"][GATE0] == "0"

        # The 5 % pods go: the floor falls at once, the gate opens, the dept-b pod binds.
        control_plane.delete_pods(tenant_ns, None)
        assert (
            wait_until(
                "dept-b on N1",
                lambda: bound_node(admin, zero_ns, "zero"),
                timeout=60,
                ignoring=NOT_YET,
            )
            == N1
        )
        assert pools(admin, N1)["allocatable"][CPU] == "8k"
        scorer.stop()
        log = scorer.log(100_000)
        assert "forbidden" not in log.lower(), log
        assert "Traceback" not in log, log
