"""Budget pools (steer/core/budget.py) end to end: `steer scorer run` publishing them on real
Nodes of kube-apiserver v1.36.2, and the real kube-scheduler enforcing them.

The scorer runs as operators run it, under the manifest's ClusterRole (bound to a client
certificate user), so the test also proves that RBAC lets it list and watch every pod and patch
`nodes/status`. It needs no Prometheus for pools (every query fails; no label is written). Tenant
pods are built by hand with the pool requests `budget_steering` computes, as the mutating
webhook adds them (extended resources must have limit = request).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scorer.kubeapi import KubeJson, node_path, pod_path
from steer.core.budget import budget_steering
from steer.core.policy import Policy, Tenant, parse_policy
from steer.testing.cluster import ROOT, ControlPlane
from steer.testing.services import running_scorer
from tests.e2e.waiting import metric, wait_until
from tests.scorer_support import SMALL_POLICY

SCORER_MANIFEST = ROOT / "manifests" / "scorer" / "scorer.yaml"
N1, N2 = "budget-e2e-1", "budget-e2e-2"
SET_KEY = "e2e.kube-steer.github.io/budget-set"
CPU5 = "kube-steer.github.io/limits-5pct-cpu"
MEM5 = "kube-steer.github.io/limits-5pct-memory"
CPU0 = "kube-steer.github.io/limits-0pct-cpu"
MEM0 = "kube-steer.github.io/limits-0pct-memory"
NO_PROMETHEUS = "http://127.0.0.1:9"

POLICY_TEXT = (
    SMALL_POLICY
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
    A tenant pod also gets its pool requests, burst label and anti-affinity, exactly as
    `budget_steering` says."""
    resources: dict[str, Any] = {"requests": dict(requests_), "limits": dict(limits)}
    labels: dict[str, str] = {}
    anti: list[Any] = []
    if tenant is not None:
        steering = budget_steering(POLICY, tenant, {"containers": [{"resources": resources}]})
        for key, units in steering.requests.items():
            resources["requests"][key] = resources["limits"][key] = str(units)
        if steering.label is not None:
            labels[steering.label[0]] = steering.label[1]
        if steering.anti_affinity is not None:
            anti.append(dict(steering.anti_affinity))
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
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
    if anti:
        body["spec"]["affinity"]["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti
        }
    return body


def pools(admin: KubeJson, node: str) -> dict[str, dict[str, str]]:
    status = admin.request("GET", node_path(node))["status"]
    return {
        part: {k: v for k, v in status[part].items() if k.startswith("kube-steer.github.io/")}
        for part in ("capacity", "allocatable")
    }


def both(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {"capacity": dict(values), "allocatable": dict(values)}


def create_pod(admin: KubeJson, namespace: str, body: Mapping[str, Any]) -> None:
    admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)


def bound_node(admin: KubeJson, namespace: str, name: str) -> str | None:
    node: str | None = admin.request("GET", pod_path(namespace, name))["spec"].get("nodeName")
    return node


def unschedulable_message(admin: KubeJson, namespace: str, name: str) -> str | None:
    pod = admin.request("GET", pod_path(namespace, name))
    for cond in pod.get("status", {}).get("conditions") or ():
        if cond["type"] == "PodScheduled" and cond["status"] == "False":
            return str(cond.get("message", ""))
    return None


def test_scheduler_enforces_the_pools_the_scorer_publishes(
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    # 8 cores / 32 GiB: room for limits at 105 % = 8400 m and 34406 MiB (at 100 %: 8000 m,
    # 32768 MiB). 20 cores: 21000 m and 20000 m, stored by the apiserver in canonical form as
    # "21k" and "20k" (the scorer must see that as equal, not rewrite it every cycle).
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
    empty_n1 = {CPU0: "8k", MEM0: "32768", CPU5: "8400", MEM5: "34406"}

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
        wait_until("pools on N1", lambda: pools(admin, N1) == both(empty_n1))
        wait_until(
            "pools on N2",
            lambda: (
                pools(admin, N2) == both({CPU0: "20k", MEM0: "32768", CPU5: "21k", MEM5: "34406"})
            ),
        )
        status = admin.request("GET", node_path(N1))["status"]
        assert status["allocatable"]["example.com/dongle"] == "4"  # foreign resources stay
        assert status["allocatable"]["cpu"] == "8"
        annotations = admin.request("GET", node_path(N1))["metadata"]["annotations"]
        assert (
            '"resources":["kube-steer.github.io/limits-0pct-cpu"'
            in annotations["kube-steer.github.io/managed"]
        )

        # Idle: a refresh writes nothing (the "21k" of N2 counts as equal to 21000) ...
        idle_writes = metric(scorer, "steer_scorer_write_requests_total")
        time.sleep(1.5)
        assert metric(scorer, "steer_scorer_write_requests_total") == idle_writes

        # A foreign burstable pod on N1 (limits 6 cores, 512 MiB) shrinks N1's pools.
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
            "burstable pod bound", lambda: bound_node(admin, foreign_ns, "burstable"), 30, 0.01
        )
        bound_at = time.monotonic()
        shrunk = {CPU0: "2k", MEM0: "32256", CPU5: "2400", MEM5: "33894"}
        wait_until(
            "N1 pools shrunk",
            lambda: pools(admin, N1) == both(shrunk),
            timeout_s=10,
            interval_s=0.02,
        )
        republish_s = time.monotonic() - bound_at
        print(f"N1 pools republished {republish_s:.2f}s after the foreign pod was bound")
        assert republish_s < 3.0, republish_s  # not one 30 s cycle later
        assert pools(admin, N2)["allocatable"][CPU5] == "21k"

        detail = scorer.get(f"/explain/node/{N1}")["budgetPools"]
        cpu = next(p for p in detail["pools"] if p["resource"] == CPU5)
        assert (cpu["room"], cpu["outsideLimits"], cpu["outsidePods"], cpu["published"]) == (
            8400,
            6000,
            1,
            "2400",
        )

        # dept-a pods on N1. Their requests fit easily (0.5 + 2 + 2.4 of 8 cores), but limits
        # of 2520 m would take the node past 105 %: that pod stays Pending; 2100 m binds.
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
                {"cpu": "2", "memory": "1Gi"},
                {"cpu": "2100m", "memory": "1Gi"},
                tenant=DEPT_A,
            ),
        )
        pod = admin.request("GET", pod_path(tenant_ns, "big-burst"))
        assert pod["spec"]["containers"][0]["resources"]["requests"][CPU5] == "2520"
        assert CPU0 not in pod["spec"]["containers"][0]["resources"]["requests"]  # it bursts
        assert (
            wait_until("small pod bound", lambda: bound_node(admin, tenant_ns, "small-burst"), 30)
            == N1
        )
        message = wait_until(
            "big pod unschedulable",
            lambda: unschedulable_message(admin, tenant_ns, "big-burst"),
            30,
        )
        assert f"Insufficient {CPU5}" in message, message
        print(f"big-burst: {message}")
        assert bound_node(admin, tenant_ns, "big-burst") is None
        # The small pod draws on its pool: the scorer does not count it against that pool, but
        # it is outside the 0 % pool (8000 - 6000 - 2100, never below 0).
        wait_until("0 % pool shrunk", lambda: pools(admin, N1)["allocatable"][CPU0] == "0", 10)
        assert pools(admin, N1)["allocatable"][CPU5] == "2400"

        # A dept-b (budget 0) pod never joins a node where a 5 % pod bursts: its anti-affinity
        # keeps it off N1 even where its requests and the 0 % pool of N2 leave room.
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
        create_pod(admin, zero_ns, zero)
        create_pod(admin, zero_ns, zero_n2)
        assert wait_until("dept-b on N2", lambda: bound_node(admin, zero_ns, "zero-n2"), 30) == N2
        message = wait_until(
            "dept-b unschedulable on N1", lambda: unschedulable_message(admin, zero_ns, "zero"), 30
        )
        assert f"Insufficient {CPU0}" in message, message  # for now the 0 % pool is spent

        # The foreign pod goes: the pool grows back and the scheduler binds the waiting pod.
        control_plane.delete_pods(foreign_ns, None)
        wait_until("N1 pools restored", lambda: pools(admin, N1)["allocatable"][CPU5] == "8400", 10)
        assert (
            wait_until("big pod bound", lambda: bound_node(admin, tenant_ns, "big-burst"), 60) == N1
        )
        # N1's 0 % pool has room again (8000 - 2100 - 2520): the burst label keeps dept-b off.
        wait_until("N1 0 % pool regrown", lambda: pools(admin, N1)["allocatable"][CPU0] == "3380")
        message = wait_until(
            "dept-b kept off by anti-affinity",
            lambda: "anti-affinity" in (unschedulable_message(admin, zero_ns, "zero") or ""),
            30,
        )
        assert bound_node(admin, zero_ns, "zero") is None
        scorer.stop()
        log = scorer.log(100_000)
        assert "forbidden" not in log.lower(), log
        assert "Traceback" not in log, log
