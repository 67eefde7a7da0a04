"""What the control-plane faults share (tests/faults/test_apiserver_restart.py,
test_leader_failover.py): eight nodes whose GPU utilisation a real Prometheus scrapes, a policy
that writes at most one node a second (so one cycle's writes of four nodes take four seconds,
and a fault can land in the middle of them), scorers that run as users of an audited group,
and readers of the apiserver's audit log: each node's writes, each collection's lists."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kits.control_plane import ControlPlane
from kits.prometheus_server import scraped_cluster
from kits.service_processes import (
    RunningScorer,
    RunningWebhook,
    register_admission,
    running_scorer,
    running_webhook,
)
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeJson

NODES = tuple(f"fault-{i}" for i in range(1, 9))
CHANGED = NODES[:4]  # their GPU utilisation moves during a test
UNCHANGED = NODES[4:]
GROUP = "kube-steer-faults"  # the scorers' users' group, audited
PREFIX = "kube-steer.github.io/"
SCORE = f"{PREFIX}score-util"  # 100 - utilisation, in steps of 10
POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {name: faults}
spec:
  scoring: {step: 10, hysteresis: 3, ttlSeconds: 600, hotPenaltyPerPod: 0, intervalSeconds: 3,
            writeQps: 1, writeBurst: 1}
  dimensions:
    - name: util
      query: avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)
      nodeLabel: hostname
      unit: pct
      direction: lowerIsBetter
      normalization: {method: fixed, min: 0, max: 100}
      weight: 1
  tenants:
    - name: dept-b
      namespaceSelector: {matchLabels: {tenant: dept-b}}
      overcommitPercent: 0
  overcommit: {enforcement: scheduler}
"""


def make_nodes(plane: ControlPlane) -> SyntheticCluster:
    """NODES in the cluster, and their GPUs at 10 % in the synthetic exporter it returns."""
    for name in NODES:
        plane.add_node(name, cpu="16", memory="64Gi", zone="zone-a")
    cluster = SyntheticCluster(nodes=len(NODES), gpus_per_node=1, node_prefix="fault-")
    for name in NODES:
        cluster.set_gpu_util(name, 10)
    return cluster


def grant_group(admin: KubeJson) -> None:
    """GROUP bound to cluster-admin: what a scorer may do is not under test here, what it
    does is (the audit log)."""
    admin.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        body={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "fault-scorers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
        },
    )


def scorer_kubeconfig(plane: ControlPlane, user: str) -> Path:
    return plane.user_kubeconfig(user, groups=[GROUP])


def node_writes(events: list[dict[str, Any]], user: str | None = None) -> dict[str, list[int]]:
    """Each node's writes (metadata or status) by a scorer (or by `user`), as response codes."""
    out: dict[str, list[int]] = {n: [] for n in NODES}
    for e in writes_to_nodes(events, user):
        out[e["objectRef"]["name"]].append(int((e.get("responseStatus") or {}).get("code") or 0))
    return out


def writes_to_nodes(
    events: list[dict[str, Any]], user: str | None = None
) -> Iterator[dict[str, Any]]:
    for e in events:
        ref = e.get("objectRef") or {}
        if (
            e.get("verb") in ("patch", "update")
            and ref.get("resource") == "nodes"
            and ref.get("name") in NODES
            and (user is None or (e.get("user") or {}).get("username") == user)
        ):
            yield e


def lists(events: list[dict[str, Any]]) -> dict[str, int]:
    """The scorer's lists by collection: resource and field selector (the bound and the
    unbound pods are two collections, each with its own watch). A list is a LIST, or a
    streaming one: a watch with sendInitialEvents=true (counted when it opens), the way the
    scorer lists where the apiserver serves it (steer/adapters/listwatch.py)."""
    out: dict[str, int] = {}
    for e in events:
        streaming = (
            e.get("verb") == "watch"
            and e.get("stage") == "ResponseStarted"
            and "sendInitialEvents=true" in str(e.get("requestURI", ""))
        )
        if e.get("verb") == "list" or streaming:
            resource = (e.get("objectRef") or {}).get("resource", "?")
            query = parse_qs(urlsplit(str(e.get("requestURI", ""))).query)
            selector = query.get("fieldSelector", [""])[0]
            key = f"{resource}{'?' + selector if selector else ''}"
            out[key] = out.get(key, 0) + 1
    return out


def labels_of(admin: KubeJson, node: str) -> dict[str, str]:
    found = admin.request("GET", f"/api/v1/nodes/{node}")["metadata"].get("labels") or {}
    return {k: v for k, v in found.items() if k.startswith(PREFIX)}


POOL_CPU = f"{PREFIX}pool-cpu"


def guaranteed_pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of half a core and 256 Mi, requests equal to limits (no gate ever moves)."""
    amounts = {"cpu": "500m", "memory": "256Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {
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


def steady_rig(
    stack: contextlib.ExitStack,
    plane: ControlPlane,
    admin: KubeJson,
    cluster: SyntheticCluster,
    policy_file: Path,
    workdir: Path,
    kubeconfig: Path,
) -> tuple[RunningWebhook, RunningScorer]:
    """Prometheus scraping `cluster`, the webhook registered, one scorer (no Lease) as the
    user of `kubeconfig`; returns once every node carries its score and its cpu pool."""
    _exporter, prom = stack.enter_context(scraped_cluster(cluster, scrape_interval_s=0.5))
    hook = stack.enter_context(running_webhook(plane, policy_file, workdir))
    register_admission(plane, hook)
    scorer = stack.enter_context(
        running_scorer(
            plane,
            policy_file,
            prom.url,
            workdir,
            name="fault-scorer",
            kubeconfig=kubeconfig,
            extra_args=["--no-leader-election"],
        )
    )
    scorer.wait_ready()
    wait_until(
        "every node labelled and pooled",
        lambda: (
            all(
                labels_of(admin, n).get(SCORE) == "90"
                and admin.request("GET", f"/api/v1/nodes/{n}")["status"]["allocatable"].get(
                    POOL_CPU
                )
                for n in NODES
            )
            or None
        ),
        timeout=60,
        interval=0.5,
    )
    return hook, scorer
